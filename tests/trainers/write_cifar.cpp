// Writes a small data set in the CIFAR-10 binary format (data_batch_1..5.bin, test_batch.bin): records of one label
// byte and 3072 pixel bytes. Each class has its own colour pattern, so a network can learn it.
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

int main(int argc, char** argv) {
    if (argc != 3) {
        std::fprintf(stderr, "usage: %s DIR RECORDS_PER_FILE\n", argv[0]);
        return 2;
    }
    const std::filesystem::path dir = argv[1];
    const int records = std::atoi(argv[2]);
    std::filesystem::create_directories(dir);
    std::mt19937 rng(7);
    const auto write = [&](const std::string& name) {
        std::ofstream out(dir / name, std::ios::binary);
        std::vector<unsigned char> record(3073);
        for (int r = 0; r < records; ++r) {
            const int label = static_cast<int>(rng() % 10);
            record[0] = static_cast<unsigned char>(label);
            for (int c = 0; c < 3; ++c)
                for (int i = 0; i < 1024; ++i) {
                    const int signal = ((i / 32 + i % 32 + c * 7) % 10 == label) ? 180 : 40;
                    record[static_cast<std::size_t>(1 + c * 1024 + i)] = static_cast<unsigned char>(signal + static_cast<int>(rng() % 40));
                }
            out.write(reinterpret_cast<const char*>(record.data()), static_cast<std::streamsize>(record.size()));
        }
    };
    for (int b = 1; b <= 5; ++b) write("data_batch_" + std::to_string(b) + ".bin");
    write("test_batch.bin");
    return 0;
}
