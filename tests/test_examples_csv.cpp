// The examples' CSV reader on malformed input (host only).
#include "gpu_test.hpp"

#include "../examples/common/csv.hpp"

#include <gtest/gtest.h>

#include <sstream>

namespace {

using streamkit_examples::csv_error;
using streamkit_examples::read_points;

streamkit_examples::point_table read(std::string const& text)
{
  std::istringstream in(text);
  return read_points(in, "places.csv");
}

TEST(ExamplesCsv, ReadsQuotedNamesInAnyColumnOrder)
{
  auto const table = read("lon,name,lat\n2.35,\"Paris, France\",48.85\n-0.12,\"The \"\"Big\"\" Smoke\",51.5\r\n\n");
  ASSERT_EQ(table.lat.size(), 2U);
  EXPECT_EQ(table.names[0], "Paris, France");
  EXPECT_EQ(table.names[1], "The \"Big\" Smoke");
  EXPECT_DOUBLE_EQ(table.lat[1], 51.5);
  EXPECT_DOUBLE_EQ(table.lon[0], 2.35);
}

TEST(ExamplesCsv, MalformedInputGivesTheLineAndTheReason)
{
  STREAMKIT_EXPECT_THROW_WITH(read(""), csv_error, "places.csv:1: empty file");
  STREAMKIT_EXPECT_THROW_WITH(read("name,latitude,lon\n"), csv_error, "places.csv:1: the header must name columns 'lat' and 'lon'");
  STREAMKIT_EXPECT_THROW_WITH(read("name,lat,lon\n"), csv_error, "no data rows");
  STREAMKIT_EXPECT_THROW_WITH(read("name,lat,lon\na,1,2\nb,north,2\n"), csv_error, "places.csv:3: latitude 'north' is not a number");
  STREAMKIT_EXPECT_THROW_WITH(read("name,lat,lon\na,1,2\nb,91,2\n"), csv_error, "places.csv:3: latitude 91 is outside [-90, 90] degrees");
  STREAMKIT_EXPECT_THROW_WITH(read("name,lat,lon\na,1,-180.5\n"), csv_error, "places.csv:2: longitude -180.5 is outside [-180, 180]");
  STREAMKIT_EXPECT_THROW_WITH(read("name,lat,lon\na,1\n"), csv_error, "places.csv:2: has 2 fields, the header 3");
  STREAMKIT_EXPECT_THROW_WITH(read("name,lat,lon\n\"a,1,2\n"), csv_error, "places.csv:2: unterminated quoted field");
  STREAMKIT_EXPECT_THROW_WITH(read("name,lat,lon\na,1.5x,2\n"), csv_error, "not a number");
  STREAMKIT_EXPECT_THROW_WITH(read("name,lat,lon\na,nan,2\n"), csv_error, "outside");
}

TEST(ExamplesCsv, FieldsAreQuotedOnOutputWhenNeeded)
{
  EXPECT_EQ(streamkit_examples::csv_field("Paris"), "Paris");
  EXPECT_EQ(streamkit_examples::csv_field("Paris, France"), "\"Paris, France\"");
  EXPECT_EQ(streamkit_examples::csv_field("a\"b"), "\"a\"\"b\"");
}

}  // namespace
