#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

#include "engine/sampling/bucket_draw.h"
#include "engine/sampling/sampler.h"
#include "engine/sampling/sampler_exp.h"
using namespace flatstate;
int main() {
  for (int vocab : {50257, 65536, 248320}) {
    for (float spread : {4.f, 80.f}) {
      Rng rng(7);
      std::vector<float> v(vocab);
      for (float& x : v) {
        const float u = rng.Uniform();
        x = -spread * u * u;
      }
      for (int i = 0; i < 5; ++i) v[rng.Next() % vocab] = 2.f * rng.Uniform();
      double mx = *std::max_element(v.begin(), v.end()), inv_t = 1.0 / 0.8;
      std::vector<uint64_t> keys;
      for (int i = 0; i < vocab; ++i)
        if ((v[i] - mx) * inv_t >= kSamplerNegligibleExponent) keys.push_back(SortKey(v[i], i));
      BucketDrawScratch s;
      long declined = 0, n = 200000;
      Rng r(1);
      for (long d = 0; d < n; ++d) declined += BucketDraw(keys, mx, inv_t, r.Uniform(), &s) < 0;
      printf("vocab %d spread %.0f candidates %zu: declined %ld of %ld\n", vocab, spread,
             keys.size(), declined, n);
    }
  }
}
