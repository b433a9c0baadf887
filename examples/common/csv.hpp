#pragma once
// A small CSV reader for the examples: quoted fields, a header naming the columns, and errors that
// give the file, the line number and the reason.

#include <cmath>
#include <cstddef>
#include <istream>
#include <stdexcept>
#include <string>
#include <vector>

namespace streamkit_examples {

class csv_error : public std::runtime_error {
 public:
  csv_error(std::string const& source, std::size_t line, std::string const& reason)
      : std::runtime_error(source + ":" + std::to_string(line) + ": " + reason)
  {
  }
};

/// Splits one CSV record (RFC 4180 quoting: "a, b" and "" for a quote inside quotes).
inline std::vector<std::string> split_record(std::string const& line, std::string const& source, std::size_t line_number)
{
  std::vector<std::string> fields(1);
  bool quoted = false;
  for (std::size_t i = 0; i < line.size(); ++i) {
    char const c = line[i];
    if (quoted) {
      if (c == '"' && i + 1 < line.size() && line[i + 1] == '"') {
        fields.back() += '"';
        ++i;
      } else if (c == '"') {
        quoted = false;
      } else {
        fields.back() += c;
      }
    } else if (c == '"' && fields.back().empty()) {
      quoted = true;
    } else if (c == ',') {
      fields.emplace_back();
    } else if (c != '\r') {
      fields.back() += c;
    }
  }
  if (quoted) { throw csv_error(source, line_number, "unterminated quoted field"); }
  return fields;
}

/// A coordinate in degrees within [-limit, limit].
inline double parse_degrees(std::string const& text, char const* what, double limit, std::string const& source,
                            std::size_t line_number)
{
  std::size_t used = 0;
  double value = 0.0;
  try {
    value = std::stod(text, &used);
  } catch (std::exception const&) {
    throw csv_error(source, line_number, std::string(what) + " '" + text + "' is not a number");
  }
  if (used != text.size()) { throw csv_error(source, line_number, std::string(what) + " '" + text + "' is not a number"); }
  if (!std::isfinite(value) || std::abs(value) > limit) {
    throw csv_error(source, line_number,
                    std::string(what) + " " + text + " is outside [-" + std::to_string(static_cast<int>(limit)) + ", " +
                      std::to_string(static_cast<int>(limit)) + "] degrees");
  }
  return value;
}

struct point_table {
  std::vector<std::string> names;  ///< empty when the file has no name column
  std::vector<double> lat, lon;    ///< degrees
};

/// Reads a CSV whose header names at least `lat` and `lon` (and optionally `name`), in any order.
inline point_table read_points(std::istream& in, std::string const& source)
{
  std::string line;
  std::size_t line_number = 1;
  if (!std::getline(in, line)) { throw csv_error(source, line_number, "empty file (expected a header with lat and lon)"); }
  auto const header = split_record(line, source, line_number);
  auto column = [&](char const* name) -> std::ptrdiff_t {
    for (std::size_t i = 0; i < header.size(); ++i) {
      if (header[i] == name) { return static_cast<std::ptrdiff_t>(i); }
    }
    return -1;
  };
  std::ptrdiff_t const lat = column("lat"), lon = column("lon"), name = column("name");
  if (lat < 0 || lon < 0) { throw csv_error(source, line_number, "the header must name columns 'lat' and 'lon'"); }
  point_table table;
  while (std::getline(in, line)) {
    ++line_number;
    if (line.empty() || line == "\r") { continue; }
    auto const fields = split_record(line, source, line_number);
    if (fields.size() != header.size()) {
      throw csv_error(source, line_number,
                      "has " + std::to_string(fields.size()) + " fields, the header " + std::to_string(header.size()));
    }
    table.lat.push_back(parse_degrees(fields[static_cast<std::size_t>(lat)], "latitude", 90.0, source, line_number));
    table.lon.push_back(parse_degrees(fields[static_cast<std::size_t>(lon)], "longitude", 180.0, source, line_number));
    if (name >= 0) { table.names.push_back(fields[static_cast<std::size_t>(name)]); }
  }
  if (table.lat.empty()) { throw csv_error(source, line_number, "no data rows"); }
  return table;
}

/// Quotes a field for CSV output when it needs it.
inline std::string csv_field(std::string const& text)
{
  if (text.find_first_of(",\"\n") == std::string::npos) { return text; }
  std::string out = "\"";
  for (char c : text) { out += c == '"' ? std::string("\"\"") : std::string(1, c); }
  return out + "\"";
}

}  // namespace streamkit_examples
