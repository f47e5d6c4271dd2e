// In-process server tests of what operators watch: ListModels, GetStats, grpc.health.v1 and the
// Prometheus /metrics endpoint.
#include <httplib.h>

#include <string>
#include <thread>

#include <grpcpp/health_check_service_interface.h>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "tests/server/server_test_fixture.h"

namespace flatstate::testing {
namespace {

using ::testing::HasSubstr;

TEST_F(ServerTest, ListModelsAndStats) {
  pb::ListModelsResponse models;
  {
    grpc::ClientContext ctx;
    ASSERT_TRUE(stub_->ListModels(&ctx, pb::ListModelsRequest(), &models).ok());
  }
  ASSERT_EQ(models.models_size(), 2);
  EXPECT_EQ(models.models(0).name(), kLinear);  // sorted by name
  EXPECT_EQ(models.models(1).name(), kSoftmax);
  const pb::ModelInfo& lin = models.models(0);
  const pb::ModelInfo& soft = models.models(1);
  EXPECT_EQ(soft.attention_kind(), "softmax");
  EXPECT_GT(soft.kv_bytes_per_token(), 0u);
  EXPECT_FALSE(soft.is_default());
  EXPECT_EQ(lin.attention_kind(), "linear_elu");
  EXPECT_TRUE(lin.is_default());
  EXPECT_GT(lin.state_bytes_per_session(), 0u);
  EXPECT_EQ(lin.fingerprint().size(), 32u);
  EXPECT_EQ(lin.device(), "cpu");
  Create(kSoftmax);
  pb::ServerStats stats;
  grpc::ClientContext ctx;
  ASSERT_TRUE(stub_->GetStats(&ctx, pb::GetStatsRequest(), &stats).ok());
  EXPECT_GE(stats.active_sessions(), 1u);
  EXPECT_EQ(stats.kv_blocks_total(), 2048u);
  EXPECT_GT(stats.rss_bytes(), 0u);
  EXPECT_EQ(stats.device(), "cpu");
  // On the CPU the device's memory is host memory (rss_bytes): the device fields stay 0.
  EXPECT_EQ(stats.device_memory_used_bytes(), 0u);
  EXPECT_EQ(stats.device_memory_total_bytes(), 0u);
  EXPECT_EQ(stats.device_state_bytes(), 0u);
}

TEST_F(ServerTest, HealthServing) {
  auto channel = grpc::CreateChannel(absl::StrCat("127.0.0.1:", server_->port()),
                                     grpc::InsecureChannelCredentials());
  auto health = grpc::health::v1::Health::NewStub(channel);
  grpc::health::v1::HealthCheckRequest req;
  grpc::health::v1::HealthCheckResponse resp;
  grpc::ClientContext ctx;
  ASSERT_TRUE(health->Check(&ctx, req, &resp).ok());
  EXPECT_EQ(resp.status(), grpc::health::v1::HealthCheckResponse::SERVING);
}

TEST(ServerMetrics, EndpointServesCountersThatMove) {
  server::ServerOptions o = TestOptions();
  o.metrics_any_port = true;
  o.metrics_host = "127.0.0.1";
  auto server = StartServer(o);
  ASSERT_NE(server, nullptr);
  httplib::Client http("127.0.0.1", server->metrics_port());
  auto before = http.Get("/metrics");
  ASSERT_TRUE(before);
  EXPECT_EQ(before->status, 200);
  const uint64_t tokens0 = MetricValue(before->body, "flatstate_tokens_generated_total");
  auto stub = Connect(server->port());
  ASSERT_TRUE(RunGenerate(stub.get(), GenRequest(kLinear, "metrics", 16)).status.ok());
  ASSERT_TRUE(RunGenerate(stub.get(), GenRequest(kSoftmax, "metrics", 16)).status.ok());
  EXPECT_EQ(RunGenerate(stub.get(), GenRequest("nope", "metrics", 16)).status.error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  // Request counters are recorded when gRPC reports the call done (OnDone), which may come a
  // moment after the client saw the status: poll briefly.
  std::string b;
  for (int i = 0; i < 100; ++i) {
    auto after = http.Get("/metrics");
    ASSERT_TRUE(after);
    b = after->body;
    if (b.find("code=\"INVALID_ARGUMENT\"} 1") != std::string::npos &&
        b.find("method=\"Generate\",code=\"OK\"} 2") != std::string::npos &&
        MetricValue(b, "flatstate_kv_blocks_free") == 2048u) {  // gauges lag a loop iteration
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_EQ(MetricValue(b, "flatstate_tokens_generated_total"), tokens0 + 32);
  EXPECT_THAT(b, HasSubstr("flatstate_requests_total{method=\"Generate\",code=\"OK\"} 2"));
  EXPECT_THAT(b, HasSubstr(
                     "flatstate_requests_total{method=\"Generate\",code=\"INVALID_ARGUMENT\"} 1"));
  EXPECT_EQ(MetricValue(b, "flatstate_time_to_first_token_seconds_count"), 2u);
  EXPECT_EQ(MetricValue(b, "flatstate_inter_token_latency_seconds_count"), 30u);
  EXPECT_GT(MetricValue(b, "flatstate_engine_step_seconds_count"), 0u);
  EXPECT_GT(MetricValue(b, "flatstate_engine_step_batch_size_count"), 0u);
  EXPECT_GT(MetricValue(b, "flatstate_rss_bytes"), 0u);
  EXPECT_THAT(b, HasSubstr("flatstate_active_sessions "));
  EXPECT_THAT(b, HasSubstr("flatstate_evicted_sessions "));
  EXPECT_THAT(b, HasSubstr("flatstate_state_bytes "));
  EXPECT_THAT(b, HasSubstr("flatstate_kv_blocks_used "));
  EXPECT_EQ(MetricValue(b, "flatstate_kv_blocks_free"), 2048u);
  EXPECT_THAT(b, HasSubstr("\nflatstate_device_memory_used_bytes 0\n"));
  EXPECT_THAT(b, HasSubstr("\nflatstate_device_memory_total_bytes 0\n"));
  EXPECT_THAT(b, HasSubstr("\nflatstate_device_state_bytes 0\n"));
}

}  // namespace
}  // namespace flatstate::testing
