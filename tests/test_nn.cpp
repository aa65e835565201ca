// kiln::nn: each module against a double-precision reference written with
// loops, the parameter tree (names, update, freeze, train), gradients of
// an MLP against finite differences, losses, and weights saved and loaded.
#include <cmath>
#include <cstdio>
#include <fstream>

#include "kiln/io.h"
#include "kiln/nn.h"
#include "test_layouts.h"
#include "test_util.h"

namespace kiln {
namespace {

using test::all_close;
using test::random_array;
using test::to_double;

// Row-major [rows, cols] view of a's values.
std::vector<double> values(const array& a) { return to_double(a); }

// y[r, o] = sum_i x[r, i] w[o, i] + b[o]
std::vector<double> linear_ref(const std::vector<double>& x, const std::vector<double>& w,
                               const std::vector<double>* b, int rows, int in, int out) {
  std::vector<double> y(rows * out);
  for (int r = 0; r < rows; ++r) {
    for (int o = 0; o < out; ++o) {
      double acc = b ? (*b)[o] : 0.0;
      for (int i = 0; i < in; ++i) acc += x[r * in + i] * w[o * in + i];
      y[r * out + o] = acc;
    }
  }
  return y;
}

TEST(NN, LinearInitAndForwardOnEveryLayout) {
  nn::Linear lin(7, 5);
  ASSERT_EQ(lin.weight.shape(), (Shape{5, 7}));
  ASSERT_EQ(lin.bias->shape(), (Shape{5}));
  const double bound = 1.0 / std::sqrt(7.0);
  auto w = values(lin.weight), b = values(*lin.bias);
  double lo = 1, hi = -1;
  for (double v : w) lo = std::min(lo, v), hi = std::max(hi, v);
  EXPECT_GE(lo, -bound);
  EXPECT_LE(hi, bound);
  EXPECT_GT(hi - lo, bound);  // spread over the range, not constant
  for (auto layout : test::kLayouts) {
    array x = test::make_input({3, 7}, layout, [](const Shape& s) { return random_array(s); });
    EXPECT_TRUE(all_close(lin(x), linear_ref(values(x), w, &b, 3, 7, 5), 1e-5, 1e-6)) << test::layout_name(layout);
  }
  // Leading batch axes and no bias.
  nn::Linear nobias(4, 3, false);
  EXPECT_FALSE(nobias.bias.has_value());
  EXPECT_EQ(nobias.parameters().size(), 1u);
  array x = random_array({2, 3, 4});
  array y = nobias(x);
  EXPECT_EQ(y.shape(), (Shape{2, 3, 3}));
  EXPECT_TRUE(all_close(y, linear_ref(values(x), values(nobias.weight), nullptr, 6, 4, 3), 1e-5, 1e-6));
  EXPECT_TRUE(test::throws_error([&] { lin(random_array({2, 6})); }, {"[Linear]", "(2,6)"}));
  EXPECT_TRUE(test::throws_error([] { nn::Linear(0, 3); }, {"[Linear]", "input_dims"}));
}

TEST(NN, EmbeddingRowsAndTiedOutput) {
  double sq = 0;
  for (double v : values(nn::Embedding(200, 6).weight)) sq += v * v;
  EXPECT_NEAR(std::sqrt(sq / 1200), 1.0 / std::sqrt(6.0), 0.05);  // normal, std 1/sqrt(dims)
  nn::Embedding emb(11, 6);
  auto w = values(emb.weight);
  array idx = array({3, 0, 10, 3, 7, 1}, {2, 3});
  array y = emb(idx);
  ASSERT_EQ(y.shape(), (Shape{2, 3, 6}));
  std::vector<double> want;
  for (int i : {3, 0, 10, 3, 7, 1}) want.insert(want.end(), w.begin() + 6 * i, w.begin() + 6 * i + 6);
  EXPECT_TRUE(all_close(y, want, 0.0));
  array h = random_array({4, 6});
  EXPECT_TRUE(all_close(emb.as_linear(h), linear_ref(values(h), w, nullptr, 4, 6, 11), 1e-5, 1e-6));
  EXPECT_TRUE(test::throws_error([&] { emb(random_array({3})); }, {"[Embedding]", "integers"}));
}

// Normalization over the last axis of [rows, d] in double.
std::vector<double> norm_ref(const std::vector<double>& x, const std::vector<double>& w,
                             const std::vector<double>& b, int rows, int d, double eps, bool rms) {
  std::vector<double> y(x.size());
  for (int r = 0; r < rows; ++r) {
    double mu = 0, ms = 0;
    for (int i = 0; i < d; ++i) mu += x[r * d + i] / d;
    for (int i = 0; i < d; ++i) {
      double c = rms ? x[r * d + i] : x[r * d + i] - mu;
      ms += c * c / d;
    }
    for (int i = 0; i < d; ++i) {
      double c = rms ? x[r * d + i] : x[r * d + i] - mu;
      y[r * d + i] = c / std::sqrt(ms + eps) * w[i] + (b.empty() ? 0.0 : b[i]);
    }
  }
  return y;
}

TEST(NN, NormsAgainstReference) {
  const int d = 9;
  nn::RMSNorm rms(d, 1e-5f);
  nn::LayerNorm ln(d, 1e-5f);
  nn::LayerNorm plain(d, 1e-3f, false);
  EXPECT_TRUE(plain.parameters().empty());
  rms.update({{"weight", random_array({d})}});
  ln.update({{"weight", random_array({d})}, {"bias", random_array({d})}});
  auto rw = values(rms.weight), lw = values(*ln.weight), lb = values(*ln.bias);
  std::vector<double> ones_d(d, 1.0);
  for (auto layout : test::kLayouts) {
    array x = test::make_input({5, d}, layout, [](const Shape& s) { return random_array(s, float32, -3, 3); });
    auto xv = values(x);
    EXPECT_TRUE(all_close(rms(x), norm_ref(xv, rw, {}, 5, d, 1e-5, true), 1e-5, 1e-5)) << test::layout_name(layout);
    EXPECT_TRUE(all_close(ln(x), norm_ref(xv, lw, lb, 5, d, 1e-5, false), 1e-5, 1e-5)) << test::layout_name(layout);
    EXPECT_TRUE(all_close(plain(x), norm_ref(xv, ones_d, {}, 5, d, 1e-3, false), 1e-5, 1e-5));
  }
  EXPECT_TRUE(test::throws_error([&] { ln(random_array({2, 4})); }, {"[LayerNorm]", "(2,4)"}));
}

TEST(NN, DropoutScalesKeptEntriesAndIsIdentityInEval) {
  nn::Dropout drop(0.25f);
  array x = random_array({64, 64}, float32, 0.5, 1.5);  // no zeros
  auto xv = values(x), yv = values(drop(x));
  int zeros = 0;
  for (size_t i = 0; i < xv.size(); ++i) {
    if (yv[i] == 0.0) {
      ++zeros;
    } else {
      EXPECT_NEAR(yv[i], xv[i] / 0.75, 1e-5);
    }
  }
  EXPECT_NEAR(zeros / 4096.0, 0.25, 0.03);
  drop.eval();
  EXPECT_FALSE(drop.training());
  EXPECT_TRUE(all_close(drop(x), xv, 0.0));
  EXPECT_TRUE(test::throws_error([] { nn::Dropout(1.0f); }, {"[Dropout]", "[0, 1)"}));
}

TEST(NN, ActivationModules) {
  array x = random_array({4, 5}, float32, -3, 3);
  auto xv = values(x);
  std::vector<double> relu_ref, silu_ref, gelu_ref, tanh_ref, fast_ref;
  for (double v : xv) {
    relu_ref.push_back(v > 0 ? v : 0);
    silu_ref.push_back(v / (1 + std::exp(-v)));
    gelu_ref.push_back(0.5 * v * (1 + std::erf(v / std::sqrt(2.0))));
    tanh_ref.push_back(0.5 * v * (1 + std::tanh(std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v))));
    fast_ref.push_back(v / (1 + std::exp(-1.702 * v)));
  }
  EXPECT_TRUE(all_close(nn::ReLU()(x), relu_ref, 0.0));
  EXPECT_TRUE(all_close(nn::SiLU()(x), silu_ref, 1e-5, 1e-6));
  EXPECT_TRUE(all_close(nn::GELU()(x), gelu_ref, 1e-5, 1e-6));
  EXPECT_TRUE(all_close(nn::GELU("tanh")(x), tanh_ref, 1e-5, 1e-6));
  EXPECT_TRUE(all_close(nn::GELU("fast")(x), fast_ref, 1e-5, 1e-6));
  EXPECT_TRUE(test::throws_error([] { nn::GELU("erf"); }, {"[GELU]", "erf"}));
}

std::shared_ptr<nn::Sequential> small_mlp(int in, int hidden, int out) {
  return std::make_shared<nn::Sequential>(std::vector<std::shared_ptr<nn::UnaryModule>>{
      std::make_shared<nn::Linear>(in, hidden), std::make_shared<nn::ReLU>(), std::make_shared<nn::Linear>(hidden, out),
      std::make_shared<nn::Dropout>(0.5f)});
}

TEST(NN, ParameterTreeNamesUpdateFreezeTrain) {
  auto mlp = small_mlp(3, 4, 2);
  std::vector<std::string> names;
  for (auto& [name, p] : mlp->parameters()) names.push_back(name);
  EXPECT_EQ(names, (std::vector<std::string>{"layers.0.bias", "layers.0.weight", "layers.2.bias", "layers.2.weight"}));
  auto mods = mlp->named_modules();
  ASSERT_EQ(mods.size(), 5u);
  EXPECT_EQ(mods[0].first, "");
  EXPECT_EQ(mods[3].first, "layers.2");
  EXPECT_EQ(mlp->leaf_modules().size(), 4u);

  array w = random_array({2, 4});
  mlp->update({{"layers.2.weight", w}});
  EXPECT_EQ(std::dynamic_pointer_cast<nn::Linear>(mlp->layers[2])->weight.id(), w.id());
  EXPECT_TRUE(test::throws_error([&] { mlp->update({{"layers.1.weight", w}}); }, {"[Module::update]", "layers.1.weight"}));
  mlp->update({{"nothing", w}}, false);  // not strict: ignored

  mlp->layers[0]->freeze();
  EXPECT_EQ(mlp->trainable_parameters().size(), 2u);
  mlp->unfreeze();
  mlp->freeze(true, {"bias"});
  auto trainable = mlp->trainable_parameters();
  EXPECT_EQ(trainable.size(), 2u);
  EXPECT_TRUE(trainable.count("layers.0.weight") && trainable.count("layers.2.weight"));
  EXPECT_TRUE(test::throws_error([&] { mlp->layers[0]->freeze(false, {"gamma"}, true); }, {"[Module::freeze]", "gamma"}));
  mlp->unfreeze(true, {"bias"});
  EXPECT_EQ(mlp->trainable_parameters().size(), 4u);

  mlp->eval();
  for (auto& [name, m] : mlp->named_modules()) EXPECT_FALSE(m->training()) << name;
  mlp->train();
  EXPECT_TRUE(mlp->layers[3]->training());

  mlp->set_dtype(float64);
  for (auto& [name, p] : mlp->parameters()) EXPECT_EQ(p.dtype(), float64) << name;
  // Reassigning a child member swaps it in the tree.
  mlp->layers[2] = std::make_shared<nn::Linear>(4, 6, false);
  EXPECT_EQ(mlp->parameters().size(), 3u);
  EXPECT_EQ(mlp->parameters().at("layers.2.weight").shape(), (Shape{6, 4}));
}

// softmax(q k^T / sqrt(hd) + mask) v per batch and head, in double; q, k, v
// are the projected [B, T, D] values.
std::vector<double> attention_ref(const std::vector<double>& q, const std::vector<double>& k,
                                  const std::vector<double>& v, const std::vector<double>& mask, int B, int L, int S,
                                  int D, int H) {
  const int hd = D / H;
  std::vector<double> out(B * L * D);
  for (int b = 0; b < B; ++b) {
    for (int h = 0; h < H; ++h) {
      for (int i = 0; i < L; ++i) {
        std::vector<double> s(S);
        double mx = -INFINITY;
        for (int j = 0; j < S; ++j) {
          double acc = 0;
          for (int c = 0; c < hd; ++c) acc += q[(b * L + i) * D + h * hd + c] * k[(b * S + j) * D + h * hd + c];
          s[j] = acc / std::sqrt(static_cast<double>(hd)) + mask[i * S + j];
          mx = std::max(mx, s[j]);
        }
        double z = 0;
        for (int j = 0; j < S; ++j) z += (s[j] = std::exp(s[j] - mx));
        for (int c = 0; c < hd; ++c) {
          double acc = 0;
          for (int j = 0; j < S; ++j) acc += s[j] / z * v[(b * S + j) * D + h * hd + c];
          out[(b * L + i) * D + h * hd + c] = acc;
        }
      }
    }
  }
  return out;
}

TEST(NN, MultiHeadAttentionAgainstReference) {
  const int B = 2, L = 3, S = 5, D = 8, H = 2;
  nn::MultiHeadAttention mha(D, H, std::nullopt, 6, std::nullopt, std::nullopt, 7, true);
  EXPECT_EQ(mha.parameters().size(), 8u);
  EXPECT_EQ(mha.value_proj->weight.shape(), (Shape{8, 6}));
  EXPECT_EQ(mha.out_proj->weight.shape(), (Shape{7, 8}));
  array queries = random_array({B, L, D});
  array keys = transpose(random_array({6, S, B}), {2, 1, 0});  // non-contiguous
  array vals = random_array({B, S, 6});
  auto proj = [](nn::Linear& lin, const array& x) { return values(lin(x)); };
  auto q = proj(*mha.query_proj, queries), k = proj(*mha.key_proj, keys), v = proj(*mha.value_proj, vals);
  auto check = [&](const std::optional<array>& mask, const std::vector<double>& additive) {
    auto att = attention_ref(q, k, v, additive, B, L, S, D, H);
    auto want = linear_ref(att, values(mha.out_proj->weight), nullptr, B * L, D, 7);
    auto ob = values(*mha.out_proj->bias);
    for (size_t i = 0; i < want.size(); ++i) want[i] += ob[i % 7];
    array got = mha(queries, keys, vals, mask);
    EXPECT_EQ(got.shape(), (Shape{B, L, 7}));
    EXPECT_TRUE(all_close(got, want, 1e-4, 1e-5));
  };
  check(std::nullopt, std::vector<double>(L * S, 0.0));
  // A bool mask keeps the true entries; an additive one is added.
  array keep = random_array({L, S}, float32) > 0.0f;
  keep = logical_or(keep, expand_dims(arange(S) == 0, 0));  // every row keeps one key
  std::vector<double> additive;
  for (double kv : values(keep)) additive.push_back(kv ? 0.0 : -INFINITY);
  check(keep, additive);
  array add_mask = random_array({L, S});
  check(add_mask, values(add_mask));
  EXPECT_TRUE(test::throws_error([&] { mha(queries, keys, vals, random_array({4, 4})); }, {"[MultiHeadAttention]"}));
  EXPECT_TRUE(test::throws_error([] { nn::MultiHeadAttention(10, 3); }, {"[MultiHeadAttention]", "divisible"}));
}

TEST(NN, CausalMaskAndTransformerBlockDoNotLookAhead) {
  array mask = nn::MultiHeadAttention::create_additive_causal_mask(4);
  auto mv = values(mask);
  for (int i = 0; i < 4; ++i) {
    for (int j = 0; j < 4; ++j) {
      if (j <= i) EXPECT_EQ(mv[i * 4 + j], 0.0);
      else EXPECT_EQ(mv[i * 4 + j], static_cast<double>(std::numeric_limits<float>::lowest()));
    }
  }
  nn::TransformerBlock block(16, 4);
  EXPECT_EQ(block.linear1->weight.shape(), (Shape{64, 16}));
  EXPECT_TRUE(block.parameters().count("attention.query_proj.weight"));
  EXPECT_TRUE(block.parameters().count("ln2.bias"));
  array x = random_array({2, 6, 16});
  array causal = nn::MultiHeadAttention::create_additive_causal_mask(6);
  array y = block(x, causal);
  ASSERT_EQ(y.shape(), (Shape{2, 6, 16}));
  // Changing the last position leaves the outputs of the others unchanged.
  array x2 = slice_update(x, random_array({2, 1, 16}), {0, 5, 0}, {2, 6, 16});
  array y2 = block(x2, causal);
  auto a = values(slice(y, {0, 0, 0}, {2, 5, 16})), b = values(slice(y2, {0, 0, 0}, {2, 5, 16}));
  EXPECT_TRUE(all_close(b, a, 1e-5, 1e-6));
  EXPECT_FALSE(all_close(y2, values(y), 1e-3));
  // Post-norm variant: same parameters, another function.
  nn::TransformerEncoderLayer post(16, 4, 32, 0.0f, nullptr, false);
  post.update(block.parameters(), false);
  EXPECT_EQ(post(x).shape(), (Shape{2, 6, 16}));
}

// A two-layer MLP in float64: gradients against central differences.
TEST(NN, ValueAndGradOfMlpMatchesFiniteDifferences) {
  auto mlp = std::make_shared<nn::Sequential>(std::vector<std::shared_ptr<nn::UnaryModule>>{
      std::make_shared<nn::Linear>(3, 5), std::make_shared<nn::GELU>("tanh"), std::make_shared<nn::LayerNorm>(5),
      std::make_shared<nn::Linear>(5, 4)});
  mlp->set_dtype(float64);
  array x = random_array({7, 3}, float64);
  array y = array({0, 3, 1, 2, 2, 0, 1}, {7});
  auto loss_fn = [&mlp](const std::vector<array>& in) {
    return nn::losses::cross_entropy((*mlp)(in[0]), in[1], std::nullopt, -1, 0.0f, "mean");
  };
  nn::Params before = mlp->parameters();
  auto [loss, grads] = nn::value_and_grad(*mlp, loss_fn)({x, y});
  EXPECT_NEAR(loss.item<double>(), loss_fn({x, y}).item<double>(), 1e-12);
  for (auto& [name, p] : mlp->parameters()) EXPECT_EQ(p.id(), before.at(name).id()) << name << " not restored";
  ASSERT_EQ(grads.size(), before.size());
  const double h = 1e-6;
  for (auto& [name, p] : before) {
    auto pv = values(p), gv = values(grads.at(name));
    ASSERT_EQ(grads.at(name).shape(), p.shape());
    for (size_t i = 0; i < pv.size(); ++i) {
      auto perturbed = [&](double delta) {
        auto moved = pv;
        moved[i] += delta;
        mlp->update({{name, array(moved, p.shape())}});
        double l = loss_fn({x, y}).item<double>();
        mlp->update({{name, p}});
        return l;
      };
      double fd = (perturbed(h) - perturbed(-h)) / (2 * h);
      EXPECT_NEAR(gv[i], fd, 1e-6 * (1 + std::abs(fd))) << name << "[" << i << "]";
    }
  }
  // Frozen parameters get no gradient; the multi-output form returns all outputs.
  mlp->layers[0]->freeze();
  auto vg = nn::value_and_grad(*mlp, [&](const std::vector<array>& in) {
    array out = (*mlp)(in[0]);
    return std::vector<array>{sum(square(out)), out};
  });
  auto [outs, g2] = vg({x});
  EXPECT_EQ(outs.size(), 2u);
  EXPECT_EQ(g2.size(), before.size() - 2);
  EXPECT_FALSE(g2.count("layers.0.weight"));
}

// Embedding (repeated tokens), causal attention, LayerNorm, MLP and the tied
// output layer in float64: every gradient against central differences.
TEST(NN, GradientsOfTinyTransformerMatchFiniteDifferences) {
  struct Tiny : nn::Module {
    Tiny() : emb(std::make_shared<nn::Embedding>(5, 4)), block(std::make_shared<nn::TransformerBlock>(4, 2, 8)) {
      register_module("emb", &emb);
      register_module("block", &block);
    }
    array operator()(const array& tokens) {
      array mask = nn::MultiHeadAttention::create_additive_causal_mask(tokens.shape(1), float64);
      return emb->as_linear((*block)((*emb)(tokens), mask));
    }
    std::shared_ptr<nn::Embedding> emb;
    std::shared_ptr<nn::TransformerBlock> block;
  } model;
  model.set_dtype(float64);
  array tokens = array({1, 3, 1, 4, 0, 2, 2, 1}, {2, 4});
  array targets = array({3, 1, 4, 0, 2, 2, 1, 3}, {2, 4});
  auto loss_fn = [&model](const std::vector<array>& in) {
    return nn::losses::cross_entropy(model(in[0]), in[1], std::nullopt, -1, 0.1f, "mean");
  };
  auto [loss, grads] = nn::value_and_grad(model, loss_fn)({tokens, targets});
  const double h = 1e-6;
  for (auto& [name, p] : model.parameters()) {
    auto pv = values(p), gv = values(grads.at(name));
    for (size_t i = 0; i < pv.size(); ++i) {
      auto at = [&](double delta) {
        auto moved = pv;
        moved[i] += delta;
        model.update({{name, array(moved, p.shape())}});
        double l = loss_fn({tokens, targets}).item<double>();
        model.update({{name, p}});
        return l;
      };
      double fd = (at(h) - at(-h)) / (2 * h);
      EXPECT_NEAR(gv[i], fd, 1e-6 * (1 + std::abs(fd))) << name << "[" << i << "]";
    }
  }
}

TEST(NN, ValueAndGradRestoresParametersWhenTheFunctionThrows) {
  nn::Linear lin(2, 2);
  array w = lin.weight;
  auto vg = nn::value_and_grad(lin, [&](const std::vector<array>& in) -> array {
    array out = lin(in[0]);
    throw Error("boom");
  });
  EXPECT_THROW(vg({random_array({1, 2})}), Error);
  EXPECT_EQ(lin.weight.id(), w.id());
}

std::vector<double> class_loss_ref(const std::vector<double>& logits, const std::vector<int>& t, int rows, int c,
                                   double smoothing) {
  std::vector<double> out(rows);
  for (int r = 0; r < rows; ++r) {
    double mx = -INFINITY, z = 0, mean = 0;
    for (int j = 0; j < c; ++j) mx = std::max(mx, logits[r * c + j]);
    for (int j = 0; j < c; ++j) z += std::exp(logits[r * c + j] - mx), mean += logits[r * c + j] / c;
    double lse = mx + std::log(z);
    out[r] = lse - (1 - smoothing) * logits[r * c + t[r]] - smoothing * mean;
  }
  return out;
}

TEST(NN, LossesAgainstReference) {
  const int rows = 6, c = 5;
  array logits = random_array({rows, c}, float64, -4, 4);
  std::vector<int> t = {0, 4, 2, 2, 1, 3};
  array targets = array(t, {rows});
  auto lv = values(logits);
  auto ref = class_loss_ref(lv, t, rows, c, 0.0);
  EXPECT_TRUE(all_close(nn::losses::cross_entropy(logits, targets), ref, 1e-12));
  double mean_ref = 0, sum_ref = 0;
  for (double v : ref) sum_ref += v, mean_ref += v / rows;
  EXPECT_NEAR(nn::losses::cross_entropy(logits, targets, std::nullopt, -1, 0.0f, "mean").item<double>(), mean_ref, 1e-12);
  EXPECT_NEAR(nn::losses::cross_entropy(logits, targets, std::nullopt, -1, 0.0f, "sum").item<double>(), sum_ref, 1e-12);
  // Class axis first, through a transposed view.
  EXPECT_TRUE(all_close(nn::losses::cross_entropy(transpose(logits), targets, std::nullopt, 0), ref, 1e-12));
  EXPECT_TRUE(all_close(nn::losses::cross_entropy(logits, targets, std::nullopt, -1, 0.2f),
                        class_loss_ref(lv, t, rows, c, static_cast<double>(0.2f)), 1e-7));
  // One-hot probabilities give the same loss; weights multiply it.
  array onehot = astype(equal(expand_dims(targets, 1), arange(c)), float64);
  EXPECT_TRUE(all_close(nn::losses::cross_entropy(logits, onehot), ref, 1e-12));
  array w = random_array({rows}, float64, 0, 1);
  auto wv = values(w);
  std::vector<double> weighted(rows);
  for (int r = 0; r < rows; ++r) weighted[r] = ref[r] * wv[r];
  EXPECT_TRUE(all_close(nn::losses::cross_entropy(logits, targets, w), weighted, 1e-12));
  std::vector<double> nll(rows);
  for (int r = 0; r < rows; ++r) nll[r] = -lv[r * c + t[r]];
  EXPECT_TRUE(all_close(nn::losses::nll_loss(logits, targets), nll, 0.0));

  array p = random_array({3, 4}, float64), q = random_array({3, 4}, float64);
  auto pv = values(p), qv = values(q);
  double mse = 0, l1 = 0;
  for (size_t i = 0; i < pv.size(); ++i) mse += (pv[i] - qv[i]) * (pv[i] - qv[i]) / 12, l1 += std::abs(pv[i] - qv[i]);
  EXPECT_NEAR(nn::losses::mse_loss(p, q).item<double>(), mse, 1e-12);
  EXPECT_NEAR(nn::losses::l1_loss(p, q, "sum").item<double>(), l1, 1e-12);
  array bt = astype(random_array({3, 4}, float64, 0, 1) > 0.5, float64);
  auto bv = values(bt);
  double bce = 0, bce_prob = 0;
  for (size_t i = 0; i < pv.size(); ++i) {
    double s = 1 / (1 + std::exp(-pv[i]));
    bce += -(bv[i] * std::log(s) + (1 - bv[i]) * std::log(1 - s)) / 12;
  }
  EXPECT_NEAR(nn::losses::binary_cross_entropy(p, bt).item<double>(), bce, 1e-12);
  array probs = sigmoid(p);
  for (size_t i = 0; i < pv.size(); ++i) {
    double s = 1 / (1 + std::exp(-pv[i]));
    bce_prob += -(bv[i] * std::log(s) + (1 - bv[i]) * std::log(1 - s)) / 12;
  }
  EXPECT_NEAR(nn::losses::binary_cross_entropy(probs, bt, std::nullopt, false).item<double>(), bce_prob, 1e-12);

  EXPECT_TRUE(test::throws_error([&] { nn::losses::mse_loss(p, q, "avg"); }, {"[mse_loss]", "avg"}));
  EXPECT_TRUE(test::throws_error([&] { nn::losses::cross_entropy(logits, array({1, 2})); },
                                 {"[cross_entropy]", "(6,5)", "(2)"}));
  EXPECT_TRUE(test::throws_error([&] { nn::losses::cross_entropy(logits, targets, std::nullopt, -1, 1.0f); },
                                 {"[cross_entropy]", "label_smoothing"}));
  EXPECT_TRUE(test::throws_error([&] { nn::losses::mse_loss(p, random_array({4, 3})); }, {"[mse_loss]", "(3,4)"}));
}

std::string temp_path(const std::string& name) { return ::testing::TempDir() + "kiln_nn_" + name; }

TEST(NN, SaveAndLoadWeights) {
  auto a = small_mlp(3, 4, 2), b = small_mlp(3, 4, 2);
  std::string path = temp_path("mlp.safetensors");
  a->save_weights(path);
  b->load_weights(path);
  auto pa = a->parameters(), pb = b->parameters();
  for (auto& [name, p] : pa) EXPECT_TRUE(all_close(pb.at(name), values(p), 0.0)) << name;
  auto c = small_mlp(3, 5, 2);
  EXPECT_TRUE(test::throws_error([&] { c->load_weights(path); }, {"[Module::load_weights]", "layers.0.bias", "(5)", "(4)"}));
  nn::Linear lin(3, 4);
  EXPECT_TRUE(test::throws_error([&] { lin.load_weights(path); }, {"[Module::load_weights]", "missing"}));
  EXPECT_TRUE(test::throws_error([&] { a->load_weights(nn::Params{{"layers.0.weight", random_array({4, 3})}}); },
                                 {"missing", "layers.0.bias"}));
  std::remove(path.c_str());
}

TEST(NN, SafetensorsRoundTripEveryDtypeAndRejectBadFiles) {
  std::unordered_map<std::string, array> arrays;
  for (Dtype t : {bool_, uint8, uint16, uint32, uint64, int8, int16, int32, int64, float16, bfloat16, float32,
                  float64}) {
    arrays.insert_or_assign(dtype_name(t), transpose(random_array({3, 5}, t, -20, 20)));
  }
  arrays.insert_or_assign("scalar", array(2.5f));
  arrays.insert_or_assign("empty", zeros({0, 4}));
  std::string path = temp_path("all.safetensors");
  save_safetensors(path, arrays, {{"format", "kiln"}});
  auto [loaded, meta] = load_safetensors(path);
  EXPECT_EQ(meta.at("format"), "kiln");
  ASSERT_EQ(loaded.size(), arrays.size());
  for (auto& [name, a] : arrays) {
    const array& l = loaded.at(name);
    EXPECT_EQ(l.dtype(), a.dtype()) << name;
    EXPECT_EQ(l.shape(), a.shape()) << name;
    EXPECT_TRUE(all_close(l, values(a), 0.0)) << name;
  }
  // A truncated file and a header that lies about the data size.
  std::ifstream in(path, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::string bad = temp_path("bad.safetensors");
  std::ofstream(bad, std::ios::binary) << bytes.substr(0, bytes.size() - 3);
  EXPECT_TRUE(test::throws_error([&] { load_safetensors(bad); }, {"[load_safetensors]", "data_offsets"}));
  std::ofstream(bad, std::ios::binary) << bytes.substr(0, 5);
  EXPECT_TRUE(test::throws_error([&] { load_safetensors(bad); }, {"[load_safetensors]", "8-byte"}));
  std::string junk(8, '\0');
  junk[0] = 4;
  std::ofstream(bad, std::ios::binary) << junk << "{{{{";
  EXPECT_TRUE(test::throws_error([&] { load_safetensors(bad); }, {"[load_safetensors]", "JSON"}));
  EXPECT_TRUE(test::throws_error([&] { load_safetensors(temp_path("missing.safetensors")); }, {"[load_safetensors]"}));
  std::remove(path.c_str());
  std::remove(bad.c_str());
}

}  // namespace
}  // namespace kiln
