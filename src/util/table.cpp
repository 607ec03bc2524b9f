#include <trainbox/util/table.h>

#include <algorithm>

namespace trainbox {

Table::Table(std::vector<std::string> headers, std::vector<bool> right_align)
    : headers_(std::move(headers)), right_(std::move(right_align)) {
  right_.resize(headers_.size(), false);
}

void Table::add_row(std::vector<std::string> cells) {
  cells.resize(headers_.size());
  rows_.push_back(std::move(cells));
}

std::string Table::render(std::string_view indent) const {
  std::vector<std::size_t> width(headers_.size());
  for (std::size_t c = 0; c < headers_.size(); ++c) {
    width[c] = headers_[c].size();
    for (const auto& r : rows_) width[c] = std::max(width[c], r[c].size());
  }
  auto line = [&](const std::vector<std::string>& cells) {
    std::string s(indent);
    for (std::size_t c = 0; c < cells.size(); ++c) {
      std::string pad(width[c] - cells[c].size(), ' ');
      s += right_[c] ? pad + cells[c] : cells[c] + (c + 1 < cells.size() ? pad : "");
      if (c + 1 < cells.size()) s += "  ";
    }
    while (!s.empty() && s.back() == ' ') s.pop_back();
    return s + "\n";
  };
  std::string out = line(headers_);
  std::vector<std::string> rule;
  for (auto w : width) rule.emplace_back(w, '-');
  out += line(rule);
  for (const auto& r : rows_) out += line(r);
  return out;
}

}  // namespace trainbox
