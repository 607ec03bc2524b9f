// The states of the c10d rendezvous (launch/rendezvous.h), each with its legal transitions written
// once: a member as the server sees one launcher (MemberState), and a launcher's link to the server
// (LinkState). One state field per entity, as torchelastic's WorkerState, instead of flags whose
// conjunctions mean a state (docs/decisions.md, "Rendezvous states"). Torch-free, no I/O.
//
// A move the table does not list is refused: the state stays, and the caller drops what asked for it
// (a late or repeated message from a launcher), so no conjunction of flags can say "gone but done".
//
//   StateField<MemberState> s{MemberState::kConnected};
//   s.to(MemberState::kJoined);                 // true
//   s.to(MemberState::kDone);                   // false: it was never assigned; still kJoined
#pragma once
#include <cstddef>
#include <iterator>
#include <string_view>

namespace trainbox::launch {

// One connection at the rendezvous server, from accept to departure:
//   kConnected  accepted; its first message (the join) has not come yet
//   kJoined     joined while the job forms (or admitted from kWaiting): node of the next assignment
//   kWaiting    elastic (--nnodes MIN:MAX): joined while the job runs; admitted at a restart boundary
//   kRunning    a node of the current attempt, its workers running
//   kDone       its workers finished this attempt; the job ends when every node is here
//   kStopped    its workers stopped for this attempt's stop; a restart waits for every node to be here
//   kGone       lost: closed, malformed, or silent for heartbeat_timeout. Final.
enum class MemberState { kConnected, kJoined, kWaiting, kRunning, kDone, kStopped, kGone };

// A launcher's link to the server:
//   kUp       joined or joining: the server's silence or departure makes it lost
//   kLost     the server closed, sent what is not the protocol, or fell silent (the job stops here)
//   kClosing  the job's end is decided (expect_close): a departure is no loss any more
//   kQuit     the client is being destroyed: its heartbeat thread ends. Final.
enum class LinkState { kUp, kLost, kClosing, kQuit };

template <class State>
struct Move {
  State from, to;
};

inline constexpr Move<MemberState> kMemberMoves[] = {
    {MemberState::kConnected, MemberState::kJoined}, {MemberState::kConnected, MemberState::kWaiting},
    {MemberState::kJoined, MemberState::kRunning},   {MemberState::kJoined, MemberState::kGone},
    {MemberState::kWaiting, MemberState::kJoined},   {MemberState::kWaiting, MemberState::kGone},
    {MemberState::kRunning, MemberState::kDone},     {MemberState::kRunning, MemberState::kStopped},
    {MemberState::kRunning, MemberState::kGone},     {MemberState::kDone, MemberState::kStopped},
    {MemberState::kDone, MemberState::kGone},        {MemberState::kStopped, MemberState::kRunning},
    {MemberState::kStopped, MemberState::kGone},
};

inline constexpr Move<LinkState> kLinkMoves[] = {
    {LinkState::kUp, LinkState::kLost},   {LinkState::kUp, LinkState::kClosing},
    {LinkState::kUp, LinkState::kQuit},   {LinkState::kLost, LinkState::kClosing},
    {LinkState::kLost, LinkState::kQuit}, {LinkState::kClosing, LinkState::kQuit},
};

template <class State, std::size_t N>
constexpr bool listed(const Move<State> (&moves)[N], State from, State to) {
  for (const auto& m : moves)
    if (m.from == from && m.to == to) return true;
  return false;
}
constexpr bool may_move(MemberState from, MemberState to) { return listed(kMemberMoves, from, to); }
constexpr bool may_move(LinkState from, LinkState to) { return listed(kLinkMoves, from, to); }

// Names for log lines and test messages, in enum order.
inline constexpr std::string_view kMemberStateNames[] = {"connected", "joined",  "waiting", "running",
                                                         "done",      "stopped", "gone"};
inline constexpr std::string_view kLinkStateNames[] = {"up", "lost", "closing", "quit"};
static_assert(std::size(kMemberStateNames) == static_cast<std::size_t>(MemberState::kGone) + 1);
static_assert(std::size(kLinkStateNames) == static_cast<std::size_t>(LinkState::kQuit) + 1);
constexpr std::string_view name(MemberState s) { return kMemberStateNames[static_cast<std::size_t>(s)]; }
constexpr std::string_view name(LinkState s) { return kLinkStateNames[static_cast<std::size_t>(s)]; }

// A state field that moves only along its table: to() returns false and leaves it for any other move.
template <class State>
class StateField {
 public:
  constexpr explicit StateField(State initial) : s_(initial) {}
  constexpr State get() const { return s_; }
  constexpr bool is(State s) const { return s_ == s; }
  constexpr bool to(State next) {
    if (!may_move(s_, next)) return false;
    s_ = next;
    return true;
  }

 private:
  State s_;
};

// The final states have no way out.
static_assert(!may_move(MemberState::kGone, MemberState::kJoined) && !may_move(LinkState::kQuit, LinkState::kUp));

}  // namespace trainbox::launch
