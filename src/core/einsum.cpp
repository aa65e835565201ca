// einsum and einsum_path (include/kiln/einsum.h), after numpy's einsum and
// opt_einsum's greedy path (the facts MLX's einsum also follows).
//
// Plan: parse the subscripts (expanding each ellipsis into letters the
// subscripts do not use, aligned at the end as broadcasting aligns axes),
// take repeated subscripts of an operand as diagonals, then contract the
// operands two at a time in the greedy order: each pair becomes one
// batched matmul ([batch.., free_a, contracted] x [batch.., contracted,
// free_b]) after summing the axes no other term needs. Everything is built
// from ordinary ops.
#include "kiln/einsum.h"

#include <algorithm>
#include <cctype>
#include <map>
#include <numeric>
#include <set>
#include <sstream>

#include "core/ops_util.h"
#include "kiln/ops.h"

namespace kiln {
namespace {

struct Parsed {
  std::vector<std::string> inputs;
  std::string output;
  std::map<char, int> sizes;  // broadcast size of each subscript
};

[[noreturn]] void einsum_fail(const char* op, const std::string& why, const std::vector<array>& operands) {
  fail(op, why, operands);
}

// Replaces "..." in sub by the last `len` letters of `spare`.
std::string expand_ellipsis(const std::string& sub, const std::string& spare, int len) {
  size_t pos = sub.find("...");
  if (pos == std::string::npos) return sub;
  return sub.substr(0, pos) + spare.substr(spare.size() - len) + sub.substr(pos + 3);
}

// Letters before + after an ellipsis; -1 when the subscript has none.
int check_letters(const char* op, const std::string& sub, const std::vector<array>& operands, int* letters) {
  int ellipses = 0;
  *letters = 0;
  for (size_t i = 0; i < sub.size(); ++i) {
    if (std::isalpha(static_cast<unsigned char>(sub[i]))) {
      ++*letters;
    } else if (sub.compare(i, 3, "...") == 0) {
      ++ellipses;
      i += 2;
    } else {
      einsum_fail(op, std::string("subscripts must be letters or \"...\", got '") + sub[i] + "'", operands);
    }
  }
  if (ellipses > 1) einsum_fail(op, "one ellipsis per subscript at most, got '" + sub + "'", operands);
  return ellipses;
}

Parsed parse(const char* op, std::string subscripts, const std::vector<array>& operands) {
  subscripts.erase(std::remove(subscripts.begin(), subscripts.end(), ' '), subscripts.end());
  if (operands.empty()) einsum_fail(op, "needs at least one operand", operands);
  Parsed p;
  std::string lhs = subscripts, rhs;
  size_t arrow = subscripts.find("->");
  bool implicit = arrow == std::string::npos;
  if (!implicit) {
    lhs = subscripts.substr(0, arrow);
    rhs = subscripts.substr(arrow + 2);
  }
  std::stringstream ss(lhs);
  for (std::string term; std::getline(ss, term, ',');) p.inputs.push_back(term);
  if (!lhs.empty() && lhs.back() == ',') p.inputs.push_back("");
  if (p.inputs.size() != operands.size()) {
    einsum_fail(op, std::to_string(operands.size()) + " operands for " + std::to_string(p.inputs.size()) +
                        " input subscripts in \"" + subscripts + "\"",
                operands);
  }
  std::string spare;
  for (char c = 'a'; c <= 'z'; ++c)
    if (subscripts.find(c) == std::string::npos) spare += c;
  for (char c = 'A'; c <= 'Z'; ++c)
    if (subscripts.find(c) == std::string::npos) spare += c;
  int longest = 0;
  for (size_t i = 0; i < p.inputs.size(); ++i) {
    int letters = 0;
    if (check_letters(op, p.inputs[i], operands, &letters)) {
      int len = operands[i].ndim() - letters;
      if (len < 0) {
        einsum_fail(op, "operand " + std::to_string(i) + " has too few dimensions for '" + p.inputs[i] + "'",
                    operands);
      }
      if (len > static_cast<int>(spare.size())) einsum_fail(op, "too many dimensions under the ellipsis", operands);
      longest = std::max(longest, len);
      p.inputs[i] = expand_ellipsis(p.inputs[i], spare, len);
    }
  }
  if (implicit) {
    // numpy: the ellipsis axes first, then the subscripts seen once, sorted.
    std::map<char, int> count;
    for (const auto& in : p.inputs)
      for (char c : in) ++count[c];
    std::string once;
    for (auto [c, n] : count)
      if (n == 1 && spare.substr(spare.size() - longest).find(c) == std::string::npos) once += c;
    std::sort(once.begin(), once.end());
    p.output = spare.substr(spare.size() - longest) + once;
  } else {
    int letters = 0;
    check_letters(op, rhs, operands, &letters);
    p.output = expand_ellipsis(rhs, spare, longest);
  }
  for (size_t i = 0; i < p.inputs.size(); ++i) {
    const std::string& in = p.inputs[i];
    if (static_cast<int>(in.size()) != operands[i].ndim()) {
      einsum_fail(op, "subscript '" + in + "' has " + std::to_string(in.size()) + " letters for operand " +
                          std::to_string(i) + " of " + std::to_string(operands[i].ndim()) + " dimensions",
                  operands);
    }
    std::map<char, int> local;
    for (size_t j = 0; j < in.size(); ++j) {
      int d = operands[i].shape(static_cast<int>(j));
      auto [it, fresh] = local.insert({in[j], d});
      if (!fresh && it->second != d) {
        einsum_fail(op, std::string("repeated subscript '") + in[j] + "' of operand " + std::to_string(i) +
                            " has different sizes",
                    operands);
      }
      auto [g, first] = p.sizes.insert({in[j], d});
      if (!first && g->second != d && g->second != 1 && d != 1) {
        einsum_fail(op, std::string("subscript '") + in[j] + "' has sizes " + std::to_string(g->second) + " and " +
                            std::to_string(d) + ", which do not broadcast",
                    operands);
      }
      g->second = std::max(g->second, d);
    }
  }
  std::set<char> seen;
  for (char c : p.output) {
    if (!seen.insert(c).second) einsum_fail(op, std::string("output subscript '") + c + "' repeats", operands);
    if (!p.sizes.count(c)) {
      einsum_fail(op, std::string("output subscript '") + c + "' is in no input", operands);
    }
  }
  return p;
}

std::string unique_chars(const std::string& s) {
  std::string out;
  for (char c : s)
    if (out.find(c) == std::string::npos) out += c;
  return out;
}

double term_size(const std::string& term, const std::map<char, int>& sizes) {
  double n = 1;
  for (char c : term) n *= sizes.at(c);
  return n;
}

// opt_einsum's flop count of one contraction over the subscripts `all`.
double flops(const std::string& all, bool inner, int terms, const std::map<char, int>& sizes) {
  return term_size(all, sizes) * (std::max(1, terms - 1) + (inner ? 1 : 0));
}

struct Step {
  std::vector<int> positions;  // sorted, into the terms left at this step
  std::string result;          // subscripts of the step's result
};

struct Path {
  std::vector<Step> steps;
  double naive_cost = 0, optimized_cost = 0;
  int naive_scaling = 0, optimized_scaling = 0;
};

// The subscripts of a contraction of `terms` positions that the output or
// the other terms still need.
std::string kept(const std::vector<std::string>& terms, const std::vector<int>& pos, const std::string& output) {
  std::string all;
  for (int i : pos) all += terms[i];
  std::string out;
  for (char c : unique_chars(all)) {
    bool needed = output.find(c) != std::string::npos;
    for (size_t k = 0; k < terms.size() && !needed; ++k) {
      if (std::find(pos.begin(), pos.end(), static_cast<int>(k)) == pos.end() &&
          terms[k].find(c) != std::string::npos) {
        needed = true;
      }
    }
    if (needed) out += c;
  }
  return out;
}

Path plan(const Parsed& p) {
  Path path;
  std::vector<std::string> terms;
  for (const auto& in : p.inputs) terms.push_back(unique_chars(in));
  std::string all;
  for (const auto& t : terms) all += t;
  all = unique_chars(all);
  bool inner = all.size() > p.output.size();
  path.naive_scaling = static_cast<int>(all.size());
  path.naive_cost = flops(all, inner, static_cast<int>(terms.size()), p.sizes);
  if (terms.size() <= 2) {
    std::vector<int> pos(terms.size());
    std::iota(pos.begin(), pos.end(), 0);
    path.steps.push_back({pos, p.output});
    path.optimized_cost = path.naive_cost;
    path.optimized_scaling = path.naive_scaling;
    return path;
  }
  while (terms.size() > 1) {
    // Greedy: the pair whose result is smallest relative to its inputs,
    // pairs that share a subscript first.
    int best_i = -1, best_j = -1;
    bool best_shares = false;
    double best_cost = 0;
    for (int i = 0; i < static_cast<int>(terms.size()); ++i) {
      for (int j = i + 1; j < static_cast<int>(terms.size()); ++j) {
        bool shares = std::any_of(terms[i].begin(), terms[i].end(),
                                  [&](char c) { return terms[j].find(c) != std::string::npos; });
        std::string r = kept(terms, {i, j}, p.output);
        double cost = term_size(r, p.sizes) - term_size(terms[i], p.sizes) - term_size(terms[j], p.sizes);
        if (best_i < 0 || (shares && !best_shares) || (shares == best_shares && cost < best_cost)) {
          best_i = i, best_j = j, best_shares = shares, best_cost = cost;
        }
      }
    }
    std::string r = terms.size() == 2 ? p.output : kept(terms, {best_i, best_j}, p.output);
    std::string both = unique_chars(terms[best_i] + terms[best_j]);
    path.optimized_cost += flops(both, both.size() > r.size(), 2, p.sizes);
    path.optimized_scaling = std::max(path.optimized_scaling, static_cast<int>(both.size()));
    path.steps.push_back({{best_i, best_j}, r});
    terms.erase(terms.begin() + best_j);
    terms.erase(terms.begin() + best_i);
    terms.push_back(r);
  }
  return path;
}

// A term: an array and one subscript per axis.
struct Term {
  array x;
  std::string sub;
};

// Takes repeated subscripts as diagonals (their axes merge into one, last).
Term diagonals(Term t, Stream s) {
  for (;;) {
    size_t a = std::string::npos, b = std::string::npos;
    for (size_t i = 0; i < t.sub.size() && a == std::string::npos; ++i) {
      size_t j = t.sub.find(t.sub[i], i + 1);
      if (j != std::string::npos) a = i, b = j;
    }
    if (a == std::string::npos) return t;
    char c = t.sub[a];
    t.x = diagonal(t.x, 0, static_cast<int>(a), static_cast<int>(b), s);
    t.sub.erase(b, 1);
    t.sub.erase(a, 1);
    t.sub += c;
  }
}

// Sums the axes whose subscripts are not in `keep`.
Term sum_unneeded(Term t, const std::string& keep, Stream s) {
  std::vector<int> axes;
  std::string sub;
  for (size_t i = 0; i < t.sub.size(); ++i) {
    if (keep.find(t.sub[i]) == std::string::npos) {
      axes.push_back(static_cast<int>(i));
    } else {
      sub += t.sub[i];
    }
  }
  if (axes.empty()) return t;
  return {sum(t.x, axes, false, s), sub};
}

Term permuted(const Term& t, const std::string& order, Stream s) {
  if (t.sub == order) return t;
  std::vector<int> perm;
  for (char c : order) perm.push_back(static_cast<int>(t.sub.find(c)));
  return {transpose(t.x, perm, s), order};
}

// Contracts a and b into the subscripts `result` (every subscript of a and
// b is in result or in both).
Term contract(Term a, Term b, const std::string& result, const std::map<char, int>& sizes, Stream s) {
  std::string batch, free_a, free_b, summed;
  for (char c : a.sub) {
    bool in_b = b.sub.find(c) != std::string::npos, out = result.find(c) != std::string::npos;
    if (in_b && out) batch += c;
    else if (in_b) summed += c;
    else free_a += c;
  }
  for (char c : b.sub)
    if (a.sub.find(c) == std::string::npos) free_b += c;
  // Summed axes of size 1 on one side broadcast to the other's size.
  auto widen = [&](Term t) {
    Shape shape = t.x.shape();
    for (size_t i = 0; i < t.sub.size(); ++i)
      if (summed.find(t.sub[i]) != std::string::npos) shape[i] = sizes.at(t.sub[i]);
    if (shape != t.x.shape()) t.x = broadcast_to(t.x, shape, s);
    return t;
  };
  a = permuted(widen(a), batch + free_a + summed, s);
  b = permuted(widen(b), batch + summed + free_b, s);
  const int nb = static_cast<int>(batch.size());
  auto prod = [](const Shape& sh, size_t from, size_t to) {
    int n = 1;
    for (size_t i = from; i < to; ++i) n *= sh[i];
    return n;
  };
  Shape sa(a.x.shape().begin(), a.x.shape().begin() + nb), sb(b.x.shape().begin(), b.x.shape().begin() + nb);
  const Shape &xa = a.x.shape(), &xb = b.x.shape();
  size_t fa = nb + free_a.size(), fb = nb + summed.size();
  sa.push_back(prod(xa, nb, fa));
  sa.push_back(prod(xa, fa, xa.size()));
  sb.push_back(prod(xb, nb, fb));
  sb.push_back(prod(xb, fb, xb.size()));
  array m = matmul(reshape(a.x, sa, s), reshape(b.x, sb, s), s);
  Shape out(m.shape().begin(), m.shape().begin() + nb);
  out.insert(out.end(), xa.begin() + nb, xa.begin() + fa);
  out.insert(out.end(), xb.begin() + fb, xb.end());
  return permuted({reshape(m, out, s), batch + free_a + free_b}, result, s);
}

std::string path_report(const std::string& subscripts, const Path& path) {
  std::ostringstream out;
  out << "  Complete contraction:  " << subscripts << "\n"
      << "         Naive scaling:  " << path.naive_scaling << "\n"
      << "     Optimized scaling:  " << path.optimized_scaling << "\n"
      << "      Naive FLOP count:  " << static_cast<size_t>(path.naive_cost) << "\n"
      << "  Optimized FLOP count:  " << static_cast<size_t>(path.optimized_cost) << "\n";
  return out.str();
}

}  // namespace

std::pair<std::vector<std::vector<int>>, std::string> einsum_path(const std::string& subscripts,
                                                                  const std::vector<array>& operands) {
  Parsed p = parse("einsum_path", subscripts, operands);
  Path path = plan(p);
  std::vector<std::vector<int>> positions;
  for (const auto& st : path.steps) positions.push_back(st.positions);
  return {positions, path_report(subscripts, path)};
}

array einsum(const std::string& subscripts, const std::vector<array>& operands, StreamOrDevice s) {
  Stream st = to_stream(s);
  Parsed p = parse("einsum", subscripts, operands);
  Path path = plan(p);
  std::vector<Term> terms;
  for (size_t i = 0; i < operands.size(); ++i) terms.push_back(diagonals({operands[i], p.inputs[i]}, st));
  for (const auto& step : path.steps) {
    Term r = sum_unneeded(terms[step.positions[0]], step.positions.size() == 2
                                                        ? unique_chars(step.result + terms[step.positions[1]].sub)
                                                        : step.result,
                          st);
    if (step.positions.size() == 2) {
      Term b = sum_unneeded(terms[step.positions[1]], unique_chars(step.result + r.sub), st);
      r = contract(r, b, step.result, p.sizes, st);
    }
    for (auto it = step.positions.rbegin(); it != step.positions.rend(); ++it) terms.erase(terms.begin() + *it);
    terms.push_back(r);
  }
  return permuted(terms.front(), p.output, st).x;
}

}  // namespace kiln
