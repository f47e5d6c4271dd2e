// Small statistics helpers for latency samples. Pure functions; thread-safe; never fail.
#ifndef FLATSTATE_CLIENTS_LOADTEST_STATS_H_
#define FLATSTATE_CLIENTS_LOADTEST_STATS_H_

#include <vector>

namespace flatstate::loadtest {

// Nearest-rank percentile (p in [0, 100]) of `samples`; 0 for an empty vector.
double Percentile(std::vector<double> samples, double p);

// Least-squares slope of y over x; 0 with fewer than two distinct x.
double Slope(const std::vector<double>& x, const std::vector<double>& y);

}  // namespace flatstate::loadtest

#endif  // FLATSTATE_CLIENTS_LOADTEST_STATS_H_
