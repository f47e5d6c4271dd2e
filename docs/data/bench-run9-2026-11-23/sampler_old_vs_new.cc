#include "engine/sampling/sampler.h"
#include <chrono>
#include <cstdio>
#include <vector>
using namespace flatstate;
std::vector<float> LmLikeLogits(int vocab, float spread) {
  Rng rng(7); std::vector<float> v(vocab);
  for (float& x : v) { const float u = rng.Uniform(); x = -spread * u * u; }
  for (int i = 0; i < 5; ++i) v[rng.Next() % (uint64_t)vocab] = 2.f * rng.Uniform();
  return v;
}
int main(){
  for (int V : {256, 50257}) for (int spread : {4, 80}) for (int k : {0, 40}) {
    auto l = LmLikeLogits(V, spread); SamplingParams p{0.8f,(uint32_t)k,1.f,1}; Rng rng(1);
#ifdef OLD
    std::vector<std::pair<float,int32_t>> sc;
#else
    SamplerScratch sc;
#endif
    int N = V==256? 20000: 60; long sum=0;
    auto t0=std::chrono::steady_clock::now();
    for(int i=0;i<N;i++) sum+=SampleToken(l.data(),V,p,&rng,&sc);
    auto t1=std::chrono::steady_clock::now();
    printf("vocab %d spread %d top_k %d: %.2f us (%ld)\n",V,spread,k,std::chrono::duration<double,std::micro>(t1-t0).count()/N,sum);
  }
}
