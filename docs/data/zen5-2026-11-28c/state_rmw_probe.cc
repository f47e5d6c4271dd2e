#include <chrono>
#include <cstdio>
#include <thread>
#include <vector>
#include <cstdlib>
#include <cstring>
// Read-modify-write bandwidth: S = S*e + k*v over 32 sessions x 18.9 MB, 2 threads.
int main(int argc, char** argv) {
  const size_t per = 18874368 / 4, sessions = 32;
  float* s = static_cast<float*>(aligned_alloc(64, per * sessions * 4));
  memset(s, 0, per * sessions * 4);
  const int T = argc > 1 ? atoi(argv[1]) : 2;
  for (int rep = 0; rep < 5; ++rep) {
    auto t0 = std::chrono::steady_clock::now();
    std::vector<std::thread> th;
    for (int t = 0; t < T; ++t) th.emplace_back([&, t] {
      for (size_t q = t; q < sessions; q += T) {
        float* p = s + q * per;
        for (size_t i = 0; i < per; ++i) p[i] = p[i] * 0.99f + 0.01f;
      }
    });
    for (auto& x : th) x.join();
    double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    printf("threads %d: %.1f ms, %.1f GB/s (read+write)\n", T, sec * 1e3, 2.0 * per * sessions * 4 / sec / 1e9);
  }
}
