// Checks JSON lines a trainer wrote against docs/metrics.md: every key emitted is listed for its line, in the listed
// order and of the listed type, and every listed key that is not reserved is emitted by every line of its kind.
//
//   metrics_keys DOCS KIND=FILE...     KIND is a line named in the docs' "line" column (summary, step), or
//                                      metrics: a --metrics file of rank 0, step lines ending with a summary line
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace {

struct listed_key {
    std::string key, line, type;
    bool reserved = false;
};

std::vector<std::string> cells(const std::string& row) {
    std::vector<std::string> out;
    std::stringstream s(row.substr(1));
    for (std::string cell; std::getline(s, cell, '|');) {
        const auto first = cell.find_first_not_of(' '), last = cell.find_last_not_of(' ');
        out.push_back(first == std::string::npos ? "" : cell.substr(first, last - first + 1));
    }
    return out;
}

/// The rows of every table whose header is "| key | line | type | unit | meaning |".
std::vector<listed_key> read_docs(const std::string& path) {
    std::ifstream in(path);
    std::vector<listed_key> keys;
    bool in_table = false;
    for (std::string row; std::getline(in, row);) {
        if (row.rfind("|", 0) != 0) {
            in_table = false;
            continue;
        }
        const auto c = cells(row);
        if (c.size() >= 5 && c[0] == "key" && c[1] == "line" && c[2] == "type") {
            in_table = true;
            continue;
        }
        if (!in_table || c.size() < 5 || c[0].find_first_not_of("-: ") == std::string::npos) continue;
        listed_key k;
        k.key = c[0].size() > 2 && c[0].front() == '`' ? c[0].substr(1, c[0].size() - 2) : c[0];
        k.reserved = c[1].find("reserved") != std::string::npos;
        k.line = c[1].substr(0, c[1].find(' '));
        k.type = c[2];
        keys.push_back(k);
    }
    return keys;
}

bool has_type(const nlohmann::json& v, const std::string& type) {
    if (type == "string") return v.is_string();
    if (type == "integer") return v.is_number_integer();
    if (type == "number") return v.is_number();
    if (type == "boolean") return v.is_boolean();
    if (type == "object") return v.is_object();
    if (type == "number or null") return v.is_number() || v.is_null();
    if (type == "array of strings" || type == "array of integers") {
        if (!v.is_array()) return false;
        for (const auto& e : v)
            if (type == "array of strings" ? !e.is_string() : !e.is_number_integer()) return false;
        return true;
    }
    return false;
}

}  // namespace

int main(int argc, char** argv) {
    if (argc < 3) {
        std::cerr << "usage: metrics_keys DOCS KIND=FILE...\n";
        return 2;
    }
    const auto listed = read_docs(argv[1]);
    int problems = 0;
    const auto problem = [&](const std::string& text) {
        std::cerr << text << '\n';
        ++problems;
    };
    if (listed.empty()) problem(std::string(argv[1]) + ": no '| key | line | type | unit | meaning |' table");
    // A line's keys that are not reserved, in the listed order, and all its listed keys.
    const auto keys_of = [&](const std::string& kind) {
        std::pair<std::vector<listed_key>, std::map<std::string, listed_key>> out;
        for (const auto& k : listed)
            if (k.line == kind) {
                out.second[k.key] = k;
                if (!k.reserved) out.first.push_back(k);
            }
        if (out.first.empty()) problem("docs list no keys for the " + kind + " line");
        return out;
    };
    const auto step_keys = keys_of("step"), summary_keys = keys_of("summary");
    for (int a = 2; a < argc; ++a) {
        const std::string arg = argv[a];
        const std::string kind = arg.substr(0, arg.find('=')), file = arg.substr(arg.find('=') + 1);
        const bool mixed = kind == "metrics";
        const auto own = mixed ? step_keys : keys_of(kind);
        std::ifstream in(file);
        int lines = 0;
        std::string last_kind;
        for (std::string text; std::getline(in, text);) {
            if (text.empty()) continue;
            ++lines;
            const std::string where = file + ":" + std::to_string(lines) + ": ";
            nlohmann::ordered_json j;
            try {
                j = nlohmann::ordered_json::parse(text);
            } catch (const std::exception& e) {
                problem(where + "not JSON: " + e.what());
                continue;
            }
            // In a metrics file, a step line starts with "step"; the line that ends a run is a summary line.
            const bool is_step = !mixed || (!j.empty() && j.begin().key() == "step");
            const std::string line_kind = mixed ? (is_step ? "step" : "summary") : kind;
            last_kind = line_kind;
            const auto& [expected, all] = mixed && !is_step ? summary_keys : own;
            std::vector<std::string> order;
            for (const auto& [key, value] : j.items()) {
                const auto it = all.find(key);
                if (it == all.end())
                    problem(where + "key '" + key + "' is not listed for the " + line_kind +
                            " line in docs/metrics.md");
                else if (it->second.reserved)
                    problem(where + "key '" + key + "' is emitted but listed as reserved");
                else if (!has_type(value, it->second.type))
                    problem(where + "key '" + key + "' is " + value.dump() + ", not of the listed type " +
                            it->second.type);
                else
                    order.push_back(key);
            }
            std::vector<std::string> want;
            for (const auto& k : expected) {
                want.push_back(k.key);
                if (!j.contains(k.key))
                    problem(where + "listed key '" + k.key + "' of the " + line_kind + " line is not emitted");
            }
            if (order != want && problems == 0) problem(where + "the keys are not in the listed order: " + text);
        }
        if (lines == 0) problem(file + ": no " + kind + " lines to check");
        if (mixed && last_kind != "summary") problem(file + ": the metrics file does not end with a summary line");
        std::cout << kind << ": " << lines << " lines of " << file << " checked against " << own.first.size()
                  << " keys\n";
    }
    return problems == 0 ? 0 : 1;
}
