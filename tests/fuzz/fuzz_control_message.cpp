// The c10d control channel's messages (launch/messages.h), as a launcher or the rendezvous
// reads them from a peer: the input is split into lines, as the channel splits what it
// receives, and each line goes to msg::decode_line.
// Properties: decoding rejects only with ProtocolError; a decoded message encodes to one line
// (no newline) that decodes to an equal message and encodes to the same bytes again, so what
// the server relays (decoded, encoded again) is what the sender meant.
#include <algorithm>
#include <string>
#include <string_view>

#include "fuzz_common.h"
#include <trainbox/launch/messages.h>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace trainbox::launch;
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  for (std::size_t pos = 0; pos <= in.size();) {
    const std::size_t nl = std::min(in.find('\n', pos), in.size());
    const std::string_view line = in.substr(pos, nl - pos);
    pos = nl + 1;
    msg::Message first;
    try {
      first = msg::decode_line(line);
    } catch (const ProtocolError&) {
      continue;
    }
    const std::string encoded = msg::encode_line(first);
    FUZZ_CHECK(encoded.find('\n') == std::string::npos);
    const msg::Message again = msg::decode_line(encoded);  // must not throw
    FUZZ_CHECK(again == first);
    FUZZ_CHECK(msg::type_of(again) == msg::type_of(first));
    FUZZ_CHECK(msg::encode_line(again) == encoded);
  }
  return 0;
}
