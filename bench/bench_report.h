// tsdg-bench output: one record per measured step, printed as a readable row
// on stdout and, when a file is given, as a JSON line.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

namespace tsdg {
namespace bench {

class Record {
 public:
  explicit Record(std::string step) : step_(std::move(step)) {}
  Record& add(const std::string& key, double value, int precision = 4);
  Record& add(const std::string& key, int64_t value);
  Record& add(const std::string& key, int value) { return add(key, static_cast<int64_t>(value)); }
  Record& add(const std::string& key, const std::string& value);
  Record& add(const std::string& key, const char* value) { return add(key, std::string(value)); }

  const std::string& step() const { return step_; }
  std::string text() const;
  std::string json() const;

 private:
  struct Field {
    std::string key;
    std::string text;  // as printed
    std::string json;  // as a JSON value
  };
  std::string step_;
  std::vector<Field> fields_;
};

class Report {
 public:
  explicit Report(const std::string& json_path);  // empty: stdout only
  ~Report();
  Report(const Report&) = delete;
  Report& operator=(const Report&) = delete;
  void emit(const Record& record);
  void note(const std::string& line);  // stdout only

 private:
  std::FILE* json_ = nullptr;
};

}  // namespace bench
}  // namespace tsdg
