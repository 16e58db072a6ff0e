// Links the two translation units that include every CUDA header of hitch (see CMakeLists.txt).
#include <cstdio>

int hitch_headers_first();
int hitch_headers_second();

int main() {
    const int units = hitch_headers_first() + hitch_headers_second();
    std::printf("every CUDA header of hitch linked into %d translation units of one program\n", units);
    return units == 2 ? 0 : 1;
}
