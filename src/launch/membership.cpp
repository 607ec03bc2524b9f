#include "membership.h"

#include <cstdio>
#include <ctime>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include <trainbox/dashboard/dashboard.h>
#include <trainbox/util/strings.h>

#include "console.h"

namespace trainbox::launch {

namespace {

// The checkpoint `trainbox train` resumes from after a restart, named as its run dir's
// checkpoints/latest pointer names it ("step_40"); "" when the run dir is unknown (not a
// `trainbox train --run-dir` command) or has none yet. Torch-free: the pointer is one line.
std::string latest_checkpoint_name(const std::string& run_dir) {
  if (run_dir.empty()) return "";
  auto text = read_file(run_dir + "/checkpoints/latest");
  if (!text) return "";
  std::string name = trim(*text);
  return starts_with(name, "step_") && name.find('/') == std::string::npos ? name : "";
}

void append_line(const std::string& path, const std::string& line) {
  if (std::FILE* f = std::fopen(path.c_str(), "a")) {
    std::fputs((line + "\n").c_str(), f);
    std::fclose(f);
  }
}

}  // namespace

bool JobWord::restarting() const {
  if (!verdict) return false;
  if (const auto* f = std::get_if<WorkerFailed>(&*verdict)) return f->job_restarts.value_or(false);
  if (const auto* l = std::get_if<NodeLost>(&*verdict)) return l->job_restarts;
  return std::holds_alternative<Admitted>(*verdict);
}

void Membership::join(SignalScope& signals) {
  server_ = RendezvousServer::try_host(cfg_);
  auto client = std::make_unique<ControlClient>(cfg_, server_ != nullptr, host_);
  const Assignment a = client->join(signals.fd(), [&signals] {
    for (int sig; (sig = signals.next()) != 0;)
      if (is_stop_signal(sig)) throw SignalWhileJoining{sig};
  });
  ctrl_ = std::move(client);
  first_attempt_ = ctrl_->attempt();
  take_place(a);
  note(fmt::format("node rank {} of {} (ranks {}..{} of {}{}); MASTER_ADDR={} MASTER_PORT={}", a.node_rank, a.nnodes,
                   a.rank_offset, a.rank_offset + cfg_.nproc_per_node - 1, a.world_size,
                   server_ ? ", hosting the rendezvous" : "", a.master_addr, a.master_port));
}

void Membership::take_place(const Assignment& a) {
  cfg_.node_rank = a.node_rank;
  cfg_.nnodes = a.nnodes;
  cfg_.rank_offset = a.rank_offset;
  cfg_.total_world_size = a.world_size;
  cfg_.master_addr = a.master_addr;
  cfg_.master_port = a.master_port;
  world_ = a;
}

void Membership::change_world(const Assignment& a, const AttemptOutcome& why) {
  const int before = world_.world_size;
  std::string cause;
  if (const auto* l = std::get_if<NodeLost>(&why))
    cause = fmt::format("lost node {} ({}, {})", l->node.node_rank, l->node.host, l->node.why);
  else if (const auto* ad = std::get_if<Admitted>(&why))
    cause = fmt::format("admitted {}", fmt::join(ad->hosts, ", "));
  else if (const auto* f = std::get_if<WorkerFailed>(&why))
    cause = fmt::format("rank {} on node {} ({}) failed", f->cause.rank, f->cause.node_rank, f->cause.host);
  const std::string from = latest_checkpoint_name(
      cfg_.dashboard.run_dir.empty() ? dashboard::run_dir_of(cfg_.command, "") : cfg_.dashboard.run_dir);
  note(fmt::format("world {} → {}: {}; resuming from {} ({} node{}; this node is node {})", before, a.world_size, cause,
                   from.empty() ? "the latest checkpoint" : from, a.nnodes, a.nnodes == 1 ? "" : "s", a.node_rank));
  if (cfg_.log_dir_given) {
    nlohmann::json rec = {{"time", std::time(nullptr)},  {"attempt", attempt_ + 1}, {"world_before", before},
                          {"world_after", a.world_size}, {"nnodes", a.nnodes},      {"cause", cause},
                          {"resume_from", from},         {"node_rank", a.node_rank}};
    append_line(cfg_.log_dir + "/membership.jsonl", rec.dump());
  }
  take_place(a);
}

void Membership::says(AttemptOutcome o) {
  if (!word_.verdict || weight(o) > weight(*word_.verdict)) word_.verdict = std::move(o);
}

ChannelNews Membership::service(short revents) {
  ChannelNews news;
  for (auto& m : ctrl_->service(revents)) {
    if (auto* r = std::get_if<msg::Ranks>(&m)) {  // another node's ranks (send_ranks), for this node's verdict
      if (r->attempt != attempt_ || r->node_rank == cfg_.node_rank) continue;
      for (auto& p : r->ranks) p.host = r->host;
      news.ranks.push_back(std::move(*r));
    } else if (const auto* s = std::get_if<msg::Stop>(&m)) {
      on_stop(*s, news);
    } else if (const auto* start = std::get_if<msg::Start>(&m)) {
      word_.next_port = start->master_port;
    } else if (const auto* assign = std::get_if<msg::Assign>(&m)) {  // elastic: the next attempt's world
      word_.next_world = assign->assignment;
    } else if (std::holds_alternative<msg::End>(m)) {
      says(Succeeded{});
      ctrl_->expect_close();
    }
  }
  // The server (node 0) is gone: closed, silent, or it sent what is not the protocol.
  if (ctrl_->server_lost() && !(word_.verdict && std::holds_alternative<NodeLost>(*word_.verdict))) {
    news.lost = ctrl_->lost_server();
    says(NodeLost{*news.lost});
  }
  return news;
}

void Membership::on_stop(const msg::Stop& s, ChannelNews& news) {
  // A stop without a restart is the rendezvous's last word: a restart it announced before (a
  // first node lost while MIN remained, then a second one below MIN) is off, whatever weighs more.
  if (!s.restart && word_.restarting()) word_.verdict.reset();
  says(std::visit(Overloaded{
                      [&](const RootCause& c) -> AttemptOutcome {
                        return WorkerFailed{c, nullptr, s.restart};
                      },
                      [&](const LostNode& l) -> AttemptOutcome {
                        return NodeLost{l, s.restart};
                      },
                      [](const msg::SignalElsewhere& g) -> AttemptOutcome {
                        return Interrupted{.signal = g.signal, .elsewhere = g};
                      },
                      [](const msg::Admitting& a) -> AttemptOutcome { return Admitted{a.hosts}; },
                  },
                  s.why));
  // The job's end is decided: node 0 may exit before this node has torn down.
  if (!s.restart) ctrl_->expect_close();
  news.stops.push_back(describe_stop(s));
}

std::string Membership::describe_stop(const msg::Stop& s) const {
  return std::visit(
      Overloaded{
          [this](const LostNode& l) {
            if (l.node_rank == cfg_.node_rank)  // told by the rendezvous, e.g. after a freeze (SIGSTOP, VM pause)
              return fmt::format("the rendezvous declared this node lost ({}); stopping this node's workers", l.why);
            return fmt::format("{} ({}); stopping this node's workers", l.describe(), l.why);
          },
          [](const msg::SignalElsewhere& g) {
            return fmt::format("node {} ({}) got {}; stopping this node's workers", g.node_rank, g.host,
                               signal_name(g.signal));
          },
          [](const RootCause& c) {
            return fmt::format("rank {} on node {} ({}) failed; stopping this node's workers", c.rank, c.node_rank,
                               c.host);
          },
          [](const msg::Admitting& a) {
            return fmt::format("admitting {} to the job; stopping this node's workers for the new world",
                               fmt::join(a.hosts, ", "));
          },
      },
      s.why);
}

}  // namespace trainbox::launch
