// The memory-bandwidth probe's rows (bench/bandwidth_probe.cc): MemoryRead/<loads>/streams:S/
// prefetch:P/threads:T. Registers only the rows this CPU can run.
#ifndef FLATSTATE_BENCH_BANDWIDTH_PROBE_H_
#define FLATSTATE_BENCH_BANDWIDTH_PROBE_H_

namespace flatstate::bench {

void RegisterBandwidthProbe();

}  // namespace flatstate::bench

#endif  // FLATSTATE_BENCH_BANDWIDTH_PROBE_H_
