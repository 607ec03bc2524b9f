// NCCL's debug log as preflight and `bench allreduce` read it (env/nccl_log.h), and NCCL's
// name-list syntax as the doctor reads NCCL_IB_HCA / NCCL_SOCKET_IFNAME (env/fabric.h).
// The input is the log text; its first line is also taken as a name list.
// Properties: the parser is total (it never throws, not even trainbox::Error); GDR channels
// are a subset of NET channels; the transport kind is NET/… exactly when NET channels were
// seen; at most 8 warnings are kept; a name list selects only names that exist.
#include <string>
#include <string_view>

#include "fuzz_common.h"
#include <trainbox/env/fabric.h>
#include <trainbox/env/nccl_log.h>
#include <trainbox/util/strings.h>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const trainbox::env::NcclTransport t = trainbox::env::parse_nccl_log(text);
  FUZZ_CHECK(t.gdr_channels >= 0 && t.gdr_channels <= t.net_channels);
  const std::string kind = trainbox::env::transport_kind(t);
  FUZZ_CHECK((t.net_channels > 0) == trainbox::starts_with(kind, "NET/"));
  FUZZ_CHECK(t.warnings.size() <= 8);
  FUZZ_CHECK(!trainbox::env::transport_summary(t).empty());
  const int gdr = trainbox::env::transport_gdr(t);
  FUZZ_CHECK(gdr == -1 || gdr == 0 || gdr == 1);

  const auto list = trainbox::env::parse_nccl_name_list(text.substr(0, text.find('\n')));
  const std::vector<std::pair<std::string, std::vector<int>>> hcas = {
      {"mlx5_0", {1}}, {"mlx5_1", {1, 2}}, {"eth0", {}}};
  for (const auto& s : trainbox::env::nccl_names_selected(list, hcas))
    FUZZ_CHECK(s == "mlx5_0" || s == "mlx5_1" || s == "eth0");
  FUZZ_CHECK(trainbox::env::nccl_names_missing(list, hcas).size() <= list.entries.size());
  return 0;
}
