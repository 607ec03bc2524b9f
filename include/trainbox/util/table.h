// trainbox/util/table.h — fixed-width text tables for every command that prints rows.
//   Table t({"GPU", "name", "memory"});
//   t.add_row({"0", "NVIDIA H200", "1.2/140 GiB"});
//   std::cout << t.render("  ");
#pragma once
#include <string>
#include <string_view>
#include <vector>

namespace trainbox {

class Table {
 public:
  explicit Table(std::vector<std::string> headers, std::vector<bool> right_align = {});
  void add_row(std::vector<std::string> cells);
  std::size_t rows() const { return rows_.size(); }
  // Header, a rule of dashes, then rows; every line starts with `indent`.
  std::string render(std::string_view indent = "") const;

 private:
  std::vector<std::string> headers_;
  std::vector<bool> right_;
  std::vector<std::vector<std::string>> rows_;
};

}  // namespace trainbox
