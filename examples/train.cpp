// kiln_train: training with kiln::nn and kiln::optimizers, end to end.
//
//   kiln_train mlp  [options]   an MLP classifies three interleaved spirals
//   kiln_train char [options]   a small character-level transformer learns
//                               the text of the GPL-3 (Debian's base-files)
//
// Options: --device cpu|gpu, --steps N, --seed S, --print-every N,
// --target LOSS (exit status 1 unless the final loss is below it: the
// training loss for mlp, the held-out loss for char), and for
// char: --text PATH, --batch B, --context T, --dims D, --layers L,
// --heads H, --lr LR, --warmup N, --dropout P. docs/training.md has
// measured runs.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "kiln/kiln.h"
#include "kiln/nn.h"
#include "kiln/optimizers.h"

using namespace kiln;

namespace {

struct Options {
  std::string task;
  std::string device = "cpu";
  int steps = -1;  // task default
  uint64_t seed = 0;
  int print_every = -1;
  double target = -1.0;  // no check
  std::string text = "/usr/share/common-licenses/GPL-3";
  int batch = 32, context = 64, dims = 128, layers = 2, heads = 4, warmup = 50;
  float lr = 3e-3f, dropout = 0.1f;
};

[[noreturn]] void usage(const std::string& why) {
  std::fprintf(stderr,
               "%s\nusage: kiln_train mlp|char [--device cpu|gpu] [--steps N] [--seed S] [--print-every N]\n"
               "       [--target LOSS] [--text PATH] [--batch B] [--context T] [--dims D] [--layers L]\n"
               "       [--heads H] [--lr LR] [--warmup N] [--dropout P]\n",
               why.c_str());
  std::exit(2);
}

Options parse(int argc, char** argv) {
  if (argc < 2) usage("missing the task");
  Options o;
  o.task = argv[1];
  if (o.task != "mlp" && o.task != "char") usage("unknown task " + o.task);
  for (int i = 2; i < argc; ++i) {
    std::string flag = argv[i];
    if (i + 1 >= argc) usage(flag + " needs a value");
    std::string v = argv[++i];
    try {
      if (flag == "--device") o.device = v;
      else if (flag == "--steps") o.steps = std::stoi(v);
      else if (flag == "--seed") o.seed = std::stoull(v);
      else if (flag == "--print-every") o.print_every = std::stoi(v);
      else if (flag == "--target") o.target = std::stod(v);
      else if (flag == "--text") o.text = v;
      else if (flag == "--batch") o.batch = std::stoi(v);
      else if (flag == "--context") o.context = std::stoi(v);
      else if (flag == "--dims") o.dims = std::stoi(v);
      else if (flag == "--layers") o.layers = std::stoi(v);
      else if (flag == "--heads") o.heads = std::stoi(v);
      else if (flag == "--lr") o.lr = std::stof(v);
      else if (flag == "--warmup") o.warmup = std::stoi(v);
      else if (flag == "--dropout") o.dropout = std::stof(v);
      else usage("unknown option " + flag);
    } catch (const std::logic_error&) {
      usage("bad value " + v + " for " + flag);
    }
  }
  if (o.device != "cpu" && o.device != "gpu") usage("--device must be cpu or gpu");
  return o;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Runs `steps` updates of `step_fn` (which returns the loss, evaluated),
// printing the mean loss of every window and what `report` adds. Returns
// the mean of the last window.
template <typename StepFn>
double train_loop(int steps, int print_every, StepFn step_fn, const std::function<std::string()>& report = nullptr) {
  auto t0 = std::chrono::steady_clock::now();
  double window = 0.0, last = 0.0;
  int in_window = 0;
  for (int step = 1; step <= steps; ++step) {
    double loss = step_fn(step);
    if (step == 1) std::printf("step %5d  loss %.4f  (first batch)\n", step, loss);
    window += loss;
    ++in_window;
    if (step % print_every == 0 || step == steps) {
      last = window / in_window;
      double t = seconds_since(t0);
      std::printf("step %5d  loss %.4f  %.1f s  %.1f ms/step%s\n", step, last, t, 1000.0 * t / step,
                  report ? report().c_str() : "");
      std::fflush(stdout);
      window = 0.0;
      in_window = 0;
    }
  }
  return last;
}

// ---- 1. MLP on three spirals ----

int run_mlp(const Options& o) {
  const int per_class = 256, classes = 3;
  const int steps = o.steps > 0 ? o.steps : 500;
  std::mt19937 gen(static_cast<uint32_t>(o.seed));
  std::normal_distribution<float> noise(0.0f, 0.1f);
  std::vector<float> xs;
  std::vector<int32_t> ys;
  for (int c = 0; c < classes; ++c) {
    for (int i = 0; i < per_class; ++i) {
      float r = static_cast<float>(i) / per_class;
      float angle = 4.0f * r + 2.0944f * c + noise(gen);
      xs.push_back(r * std::cos(angle));
      xs.push_back(r * std::sin(angle));
      ys.push_back(c);
    }
  }
  array x(xs, {per_class * classes, 2});
  array y(ys, {per_class * classes});

  auto model = std::make_shared<nn::Sequential>(std::vector<std::shared_ptr<nn::UnaryModule>>{
      std::make_shared<nn::Linear>(2, 64), std::make_shared<nn::SiLU>(), std::make_shared<nn::Linear>(64, 64),
      std::make_shared<nn::SiLU>(), std::make_shared<nn::Linear>(64, classes)});
  auto loss_and_grad = nn::value_and_grad(*model, [&model](const std::vector<array>& in) {
    return nn::losses::cross_entropy((*model)(in[0]), in[1], std::nullopt, -1, 0.0f, "mean");
  });
  optimizers::AdamW opt(optimizers::cosine_decay(1e-2f, steps, 1e-4f), {0.9f, 0.999f}, 1e-8f, 0.0f);

  std::printf("mlp: 2-64-64-3 SiLU, %d points in %d spirals, AdamW, %d full-batch steps on %s\n",
              per_class * classes, classes, steps, o.device.c_str());
  double final_loss = train_loop(steps, o.print_every > 0 ? o.print_every : 50, [&](int) {
    auto [loss, grads] = loss_and_grad({x, y});
    opt.update(*model, grads);
    std::vector<array> outs{loss};
    for (auto& [name, p] : model->parameters()) outs.push_back(p);
    for (auto& [name, s] : opt.state()) outs.push_back(s);
    kiln::eval(outs);
    return loss.item<double>();
  });
  array predicted = argmax((*model)(x), -1);
  double accuracy = mean(astype(equal(predicted, astype(y, uint32)), float32)).item<double>();
  std::printf("final loss %.4f, accuracy %.1f%%\n", final_loss, 100.0 * accuracy);
  if (o.target > 0 && !(final_loss < o.target)) {
    std::printf("FAILED: final loss %.4f is not below the target %.4f\n", final_loss, o.target);
    return 1;
  }
  return 0;
}

// ---- 2. Character-level transformer ----

// Token and position embeddings, pre-norm transformer blocks with a causal
// mask, a final LayerNorm and the token embedding as output layer.
class CharTransformer : public nn::Module {
 public:
  CharTransformer(int vocab, int context, int dims, int num_layers, int heads, float dropout)
      : embedding(std::make_shared<nn::Embedding>(vocab, dims)),
        positions(std::make_shared<nn::Embedding>(context, dims)),
        norm(std::make_shared<nn::LayerNorm>(dims)) {
    register_module("embedding", &embedding);
    register_module("positions", &positions);
    for (int i = 0; i < num_layers; ++i) {
      blocks.push_back(std::make_shared<nn::TransformerBlock>(dims, heads, 4 * dims, dropout,
                                                              [](const array& h) { return gelu_approx(h); }));
    }
    for (int i = 0; i < num_layers; ++i) register_module("blocks." + std::to_string(i), &blocks[i]);
    register_module("norm", &norm);
  }

  // tokens [B, T] -> logits [B, T, vocab]
  array operator()(const array& tokens) {
    const int T = tokens.shape(1);
    array h = (*embedding)(tokens) + (*positions)(arange(T));
    array mask = nn::MultiHeadAttention::create_additive_causal_mask(T);
    for (auto& block : blocks) h = (*block)(h, mask);
    return embedding->as_linear((*norm)(h));
  }

  std::shared_ptr<nn::Embedding> embedding, positions;
  std::vector<std::shared_ptr<nn::TransformerBlock>> blocks;
  std::shared_ptr<nn::LayerNorm> norm;
};

int run_char(const Options& o) {
  std::ifstream in(o.text, std::ios::binary);
  if (!in) {
    std::fprintf(stderr,
                 "kiln_train char: cannot read %s (Debian's base-files ships it); pass another text with --text\n",
                 o.text.c_str());
    return 2;
  }
  std::stringstream buf;
  buf << in.rdbuf();
  const std::string text = buf.str();
  std::map<unsigned char, int> vocab_index;
  for (unsigned char c : text) vocab_index[c] = 0;
  int vocab = 0;
  for (auto& [c, id] : vocab_index) id = vocab++;
  // Every tenth block of 1024 characters is held out: the end of the text
  // alone (how to apply the licence) reads unlike the rest.
  std::vector<int32_t> train_ids, val_ids;
  for (size_t i = 0; i < text.size(); ++i) {
    ((i / 1024) % 10 == 9 ? val_ids : train_ids).push_back(vocab_index[static_cast<unsigned char>(text[i])]);
  }
  if (val_ids.size() < static_cast<size_t>(o.context) + 2) {
    usage("the text is too short: it needs 10 blocks of 1024 characters and a held-out block longer than the context");
  }

  const int steps = o.steps > 0 ? o.steps : 400;
  const int warmup = std::min(o.warmup, steps / 2);
  const int B = o.batch, T = o.context;
  std::mt19937 gen(static_cast<uint32_t>(o.seed));
  auto batch = [&](const std::vector<int32_t>& ids, std::mt19937& g) {
    std::uniform_int_distribution<size_t> start(0, ids.size() - T - 1);
    std::vector<int32_t> x(B * T), y(B * T);
    for (int b = 0; b < B; ++b) {
      size_t s = start(g);
      for (int t = 0; t < T; ++t) {
        x[b * T + t] = ids[s + t];
        y[b * T + t] = ids[s + t + 1];
      }
    }
    return std::make_pair(array(x, {B, T}), array(y, {B, T}));
  };

  CharTransformer model(vocab, T, o.dims, o.layers, o.heads, o.dropout);
  size_t n_params = 0;
  for (auto& [name, p] : model.parameters()) n_params += p.size();
  auto loss_fn = [&model](const std::vector<array>& in) {
    return nn::losses::cross_entropy(model(in[0]), in[1], std::nullopt, -1, 0.0f, "mean");
  };
  auto loss_and_grad = nn::value_and_grad(model, loss_fn);
  auto schedule = optimizers::join_schedules(
      {optimizers::linear_schedule(0.0f, o.lr, warmup), optimizers::cosine_decay(o.lr, steps - warmup, o.lr / 10)},
      {warmup});
  optimizers::AdamW opt(schedule);

  std::printf(
      "char: %zu characters (vocabulary %d, ln %d = %.2f nats), %d layers, dims %d, %d heads, context %d, "
      "batch %d, %zu parameters, AdamW lr %g (warmup %d, cosine), %d steps on %s\n",
      text.size(), vocab, vocab, std::log(static_cast<double>(vocab)), o.layers, o.dims, o.heads, T, B, n_params,
      o.lr, warmup, steps, o.device.c_str());
  // Held-out loss (dropout off) over a fixed set of batches.
  auto held_out = [&](int batches) {
    model.eval();
    std::mt19937 val_gen(1234);
    double val = 0.0;
    for (int i = 0; i < batches; ++i) {
      auto [x, y] = batch(val_ids, val_gen);
      val += loss_fn({x, y}).item<double>() / batches;
    }
    model.train();
    return val;
  };
  double final_loss = train_loop(
      steps, o.print_every > 0 ? o.print_every : 50,
      [&](int) {
        auto [x, y] = batch(train_ids, gen);
        auto [loss, grads] = loss_and_grad({x, y});
        opt.update(model, grads);
        std::vector<array> outs{loss};
        for (auto& [name, p] : model.parameters()) outs.push_back(p);
        for (auto& [name, s] : opt.state()) outs.push_back(s);
        kiln::eval(outs);
        return loss.item<double>();
      },
      [&] {
        char buf[64];
        std::snprintf(buf, sizeof buf, "  held-out %.4f", held_out(4));
        return std::string(buf);
      });
  const double val = held_out(16);
  std::printf("final training loss %.4f, held-out loss %.4f nats/char\n", final_loss, val);
  if (o.target > 0 && !(val < o.target)) {
    std::printf("FAILED: the held-out loss %.4f is not below the target %.4f\n", val, o.target);
    return 1;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options o = parse(argc, argv);
  try {
    if (o.device == "gpu") {
      if (!is_available(Device::gpu)) {
        std::fprintf(stderr, "kiln_train: no GPU here (or this build has no CUDA backend)\n");
        return 2;
      }
      set_default_device(Device::gpu);
    }
    random::seed(o.seed);
    return o.task == "mlp" ? run_mlp(o) : run_char(o);
  } catch (const Error& e) {
    std::fprintf(stderr, "kiln_train: %s\n", e.what());
    return 1;
  }
}
