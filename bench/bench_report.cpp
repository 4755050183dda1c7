#include "bench_report.h"

#include <cmath>
#include <sstream>

#include "types.h"

namespace tsdg {
namespace bench {

namespace {

std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char escaped[8];
      std::snprintf(escaped, sizeof(escaped), "\\u%04x", c);
      out += escaped;
    } else {
      out += c;
    }
  }
  return out + "\"";
}

}  // namespace

Record& Record::add(const std::string& key, double value, int precision) {
  std::ostringstream text;
  text.precision(precision);
  text << value;
  std::ostringstream json;
  json.precision(9);
  json << value;
  fields_.push_back({key, text.str(), std::isfinite(value) ? json.str() : "null"});
  return *this;
}

Record& Record::add(const std::string& key, int64_t value) {
  fields_.push_back({key, std::to_string(value), std::to_string(value)});
  return *this;
}

Record& Record::add(const std::string& key, const std::string& value) {
  fields_.push_back({key, value, json_string(value)});
  return *this;
}

std::string Record::text() const {
  char head[32];
  std::snprintf(head, sizeof(head), "%-14s", step_.c_str());
  std::string line = head;
  for (const Field& f : fields_) line += " " + f.key + "=" + f.text;
  return line;
}

std::string Record::json() const {
  std::string line = "{\"step\":" + json_string(step_);
  for (const Field& f : fields_) line += "," + json_string(f.key) + ":" + f.json;
  return line + "}";
}

Report::Report(const std::string& json_path) {
  if (json_path.empty()) return;
  json_ = std::fopen(json_path.c_str(), "w");
  if (json_ == nullptr) throw Error(Status::InvalidArgument, "cannot write " + json_path);
}

Report::~Report() {
  if (json_ != nullptr) std::fclose(json_);
}

void Report::emit(const Record& record) {
  std::printf("%s\n", record.text().c_str());
  std::fflush(stdout);
  if (json_ != nullptr) {
    std::fprintf(json_, "%s\n", record.json().c_str());
    std::fflush(json_);
  }
}

void Report::note(const std::string& line) {
  std::printf("%s\n", line.c_str());
  std::fflush(stdout);
}

}  // namespace bench
}  // namespace tsdg
