#include <kiln/kiln.h>

#include <cstdio>

int main() {
  kiln::array a = kiln::arange(1.0, 7.0, 1.0);
  kiln::array m = kiln::reshape(a, {2, 3});
  float total = kiln::sum(kiln::matmul(m, kiln::transpose(m))).item<float>();
  std::printf("kiln %s: %g\n", kiln::version(), total);
  return total == 155.0f ? 0 : 1;  // m m^T = [[14, 32], [32, 77]]
}
