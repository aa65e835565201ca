// MLX as a peer timed in the same run (`kiln bench --mlx`). MLX is a Python
// package, so its side runs in a child process: bench/peers/mlx_peers.py
// --serve, started once, idle on its stdin while Kiln times its rows. After
// each Kiln row the bench asks the child to time the same drill (same name,
// dtype and shape, the same warm-up / median rules), so both sides see the
// machine in the same minute; on a VM whose bandwidth moves by 2x within
// minutes a peers file written an hour earlier says little.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>

#include "bench.h"

extern char** environ;

namespace kiln::bench {

MlxPeer::MlxPeer(const std::string& python, const std::string& script, const std::string& device)
    : python_(python), script_(script), device_(device), peer_name_("mlx_" + device) {
  start();
}

void MlxPeer::start() {
  const std::string& python = python_;
  const std::string& script = script_;
  int to_child[2], from_child[2];
  if (pipe2(to_child, O_CLOEXEC) != 0) {
    status_ = std::string("pipe: ") + std::strerror(errno);
    return;
  }
  if (pipe2(from_child, O_CLOEXEC) != 0) {
    status_ = std::string("pipe: ") + std::strerror(errno);
    close(to_child[0]);
    close(to_child[1]);
    return;
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, to_child[0], 0);
  posix_spawn_file_actions_adddup2(&actions, from_child[1], 1);
  std::vector<std::string> args = {python, script, "--serve", "--device", device_};
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  const int rc = posix_spawnp(&pid_, python.c_str(), &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  close(to_child[0]);
  close(from_child[1]);
  if (rc != 0) {
    status_ = "cannot start " + python + ": " + std::strerror(rc);
    close(to_child[1]);
    close(from_child[0]);
    pid_ = -1;
    return;
  }
  // A child that dies must not kill the bench with SIGPIPE on the next write.
  signal(SIGPIPE, SIG_IGN);
  to_ = fdopen(to_child[1], "w");
  from_ = fdopen(from_child[0], "r");
  std::string hello;
  if (!read_line(hello, static_cast<int>(kMlxRowLimitSeconds * 1000))) {
    status_ = script + " --serve ended before it answered (is mlx installed for " + python + "?)";
    stop();
    return;
  }
  try {
    auto j = nlohmann::json::parse(hello);
    status_ = "mlx " + j.at("mlx").get<std::string>() + " on the " + j.at("device").get<std::string>();
    ok_ = true;
  } catch (const std::exception&) {
    status_ = script + " --serve answered '" + hello + "'";
    stop();
  }
}

MlxPeer::~MlxPeer() { stop(); }

bool MlxPeer::read_line(std::string& line, int timeout_ms) {
  line.clear();
  if (!from_) return false;
  if (timeout_ms >= 0) {
    pollfd p = {fileno(from_), POLLIN, 0};
    int rc;
    while ((rc = poll(&p, 1, timeout_ms)) < 0 && errno == EINTR) {
    }
    if (rc == 0) return false;
  }
  int ch;
  while ((ch = std::fgetc(from_)) != EOF && ch != '\n') line += static_cast<char>(ch);
  return ch == '\n';
}

void MlxPeer::stop(bool kill_child) {
  ok_ = false;
  if (kill_child && pid_ > 0) kill(pid_, SIGKILL);
  if (to_) std::fclose(to_);  // EOF on the child's stdin ends its loop
  if (from_) std::fclose(from_);
  to_ = from_ = nullptr;
  if (pid_ > 0) {
    int st = 0;
    waitpid(pid_, &st, 0);
    pid_ = -1;
  }
}

std::optional<double> MlxPeer::time_us(const std::string& key, int reps, double budget_s, std::string* why) {
  if (!ok_) {
    if (why) *why = status_;
    return std::nullopt;
  }
  const nlohmann::json req = {{"key", key}, {"reps", reps}, {"budget_s", budget_s}};
  std::string line;
  if (std::fprintf(to_, "%s\n", req.dump().c_str()) < 0 || std::fflush(to_) != 0) {
    status_ = "the MLX peer process ended (at " + key + ")";
    stop();
    if (why) *why = status_;
    return std::nullopt;
  }
  // MLX's CPU backend is 100x slower than Kiln on some rows (its bf16
  // quantized_matmul); a row it cannot finish in time is left without MLX
  // and the child started afresh for the next.
  const double limit_s = std::max(kMlxRowLimitSeconds, 4 * budget_s);
  if (!read_line(line, static_cast<int>(limit_s * 1000))) {
    const bool alive = from_ && !std::feof(from_);
    stop(/*kill_child=*/true);
    if (!alive) {
      status_ = "the MLX peer process ended (at " + key + ")";
      if (why) *why = status_;
      return std::nullopt;
    }
    if (why) *why = "MLX took over " + std::to_string(static_cast<int>(limit_s)) + " s";
    std::fprintf(stderr, "kiln bench: MLX took over %.0f s on %s; restarting it for the next rows\n", limit_s,
                 key.c_str());
    start();
    return std::nullopt;
  }
  try {
    auto j = nlohmann::json::parse(line);
    if (j.at("time_us").is_number()) return j.at("time_us").get<double>();
    if (why) *why = j.value("why", std::string("no time"));
  } catch (const std::exception&) {
    if (why) *why = "unreadable answer '" + line + "'";
  }
  return std::nullopt;
}

void MlxPeer::time_row(BenchRow& row, int reps, double budget_s) {
  if (!ok_ || !row.time_us) return;
  std::string why;
  row.mlx_time_us = time_us(key_of(row.drill, row.name, row.dtype, row.shape), reps, budget_s, &why);
  if (!row.mlx_time_us) return;
  row.all_peers.push_back({peer_name_, *row.mlx_time_us});
  row.mlx_ratio = *row.mlx_time_us / *row.time_us;
}

std::unique_ptr<MlxPeer> start_mlx_peer(const BenchOptions& opts) {
  if (!opts.mlx) return nullptr;
  std::string script = opts.mlx_script;
#ifdef KILN_SOURCE_DIR
  if (script.empty() && access(KILN_SOURCE_DIR "/bench/peers/mlx_peers.py", R_OK) == 0)
    script = KILN_SOURCE_DIR "/bench/peers/mlx_peers.py";
#endif
  if (script.empty()) script = "bench/peers/mlx_peers.py";
  auto peer = std::make_unique<MlxPeer>(opts.mlx_python, script, opts.device);
  if (!peer->available()) {
    std::fprintf(stderr, "kiln bench: --mlx: no MLX peer: %s\n", peer->status().c_str());
    return nullptr;
  }
  std::printf("MLX peer: %s (%s %s), each row timed right after Kiln's\n", peer->status().c_str(),
              opts.mlx_python.c_str(), script.c_str());
  return peer;
}

}  // namespace kiln::bench
