// The Decoder service end to end: a generated softmax layer written as a
// model directory, loaded by an in-process ZoomServer, used over gRPC.
#include <grpcpp/grpcpp.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>

#include "absl/strings/str_cat.h"
#include "client/zoom_client.h"
#include "common/status_macros.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/engine/decoder_engine.h"
#include "server/grpc/zoom_server.h"
#include "tests/testing/http_get.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/test_env.h"
#include "zoom/v1/decoder.grpc.pb.h"

namespace zoom {
namespace {

using ::zoom::testing::StatusIs;
using ::zoom::testing::TempDir;

constexpr uint32_t kV = 800, kD = 16;

struct Layer {
  std::vector<float> W, b;
};

Layer MakeLayer(uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> g;
  Layer l;
  l.W.resize(kV * kD);
  l.b.resize(kV);
  for (float& x : l.W) x = g(rng) / 4;
  for (float& x : l.b) x = g(rng);
  return l;
}

void WriteFile(const std::string& path, const void* data, size_t bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(static_cast<const char*>(data), bytes);
}

// Writes DIR/{W.f32,b.f32,vocab.txt,meta.json}; `w_rows` lets a test write a
// W of the wrong size.
void WriteModel(const std::string& dir, const Layer& l, uint32_t w_rows = kV) {
  std::filesystem::create_directories(dir);
  WriteFile(dir + "/W.f32", l.W.data(), size_t{w_rows} * kD * 4);
  WriteFile(dir + "/b.f32", l.b.data(), kV * 4);
  std::ofstream vocab(dir + "/vocab.txt");
  for (uint32_t i = 0; i < kV; ++i) vocab << "w" << i << "\n";
  std::ofstream meta(dir + "/meta.json");
  meta << "{\"vocab_size\": " << kV << ", \"dim\": " << kD << "}\n";
}

std::vector<uint32_t> BruteTopK(const Layer& l, const float* h, uint32_t k) {
  std::vector<std::pair<double, uint32_t>> z(kV);
  for (uint32_t i = 0; i < kV; ++i) {
    double s = l.b[i];
    for (uint32_t j = 0; j < kD; ++j) s += double{l.W[i * kD + j]} * h[j];
    z[i] = {-s, i};
  }
  std::partial_sort(z.begin(), z.begin() + k, z.end());
  std::vector<uint32_t> ids;
  for (uint32_t i = 0; i < k; ++i) ids.push_back(z[i].second);
  return ids;
}

class DecoderServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    layer_ = MakeLayer(5);
    model_dir_ = tmp_.File("model");
    WriteModel(model_dir_, layer_);
    Start();
  }
  void Start() {
    server::ServerOptions o;
    o.database.data_dir = tmp_.File("data");
    o.grpc_address = "127.0.0.1:0";
    o.metrics_address = "127.0.0.1:0";
    o.threads = 3;
    server_ = std::make_unique<server::ZoomServer>(o);
    ASSERT_OK(server_->Start());
    channel_ = client::ZoomClient::Connect(absl::StrCat("127.0.0.1:", server_->grpc_port()))
                   ->channel();
    stub_ = v1::Decoder::NewStub(channel_);
  }
  absl::StatusOr<v1::ModelInfo> Load(const std::string& name, const std::string& dir) {
    grpc::ClientContext ctx;
    v1::LoadModelRequest req;
    req.set_name(name);
    req.set_dir(dir);
    req.set_wait(true);
    v1::LoadModelResponse resp;
    ZOOM_RETURN_IF_ERROR(client::FromGrpc(stub_->LoadModel(&ctx, req, &resp)));
    return resp.info();
  }
  v1::TopKRequest Request(const std::string& model, const std::vector<float>& h, uint32_t k) {
    v1::TopKRequest req;
    req.set_model(model);
    req.set_k(k);
    for (size_t i = 0; i + kD <= h.size(); i += kD) {
      req.add_contexts()->mutable_h()->Assign(h.begin() + i, h.begin() + i + kD);
    }
    return req;
  }
  absl::StatusOr<v1::TopKResponse> TopK(const v1::TopKRequest& req) {
    grpc::ClientContext ctx;
    v1::TopKResponse resp;
    ZOOM_RETURN_IF_ERROR(client::FromGrpc(stub_->TopK(&ctx, req, &resp)));
    return resp;
  }
  std::vector<float> Contexts(size_t n, uint32_t seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> g;
    std::vector<float> h(n * kD);
    for (float& x : h) x = g(rng);
    return h;
  }

  TempDir tmp_;
  Layer layer_;
  std::string model_dir_;
  std::unique_ptr<server::ZoomServer> server_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::Decoder::Stub> stub_;
};

TEST_F(DecoderServiceTest, LoadListTopKExactAndGraphAgreeWithBruteForce) {
  ASSERT_OK_AND_ASSIGN(v1::ModelInfo info, Load("lm", model_dir_));
  EXPECT_EQ(info.state(), v1::SERVING);
  EXPECT_EQ(info.vocab_size(), kV);
  EXPECT_EQ(info.dim(), kD);
  EXPECT_GT(info.graph_bytes(), 0u);
  {
    grpc::ClientContext ctx;
    v1::ListModelsResponse list;
    ASSERT_TRUE(stub_->ListModels(&ctx, v1::ListModelsRequest(), &list).ok());
    ASSERT_EQ(list.models_size(), 1);
    EXPECT_EQ(list.models(0).name(), "lm");
  }
  const std::vector<float> h = Contexts(50, 9);
  v1::TopKRequest req = Request("lm", h, 10);
  req.set_return_words(true);
  req.set_return_probs(true);
  req.set_exact(true);
  ASSERT_OK_AND_ASSIGN(v1::TopKResponse exact, TopK(req));
  req.set_exact(false);
  req.set_ef(128);
  ASSERT_OK_AND_ASSIGN(v1::TopKResponse graph, TopK(req));
  ASSERT_EQ(exact.results_size(), 50);
  ASSERT_EQ(graph.results_size(), 50);
  double overlap = 0;
  for (int i = 0; i < 50; ++i) {
    const std::vector<uint32_t> truth = BruteTopK(layer_, h.data() + i * kD, 10);
    const auto& e = exact.results(i);
    ASSERT_EQ(e.ids_size(), 10);
    for (int t = 0; t < 10; ++t) EXPECT_EQ(e.ids(t), truth[t]) << "context " << i;
    EXPECT_EQ(e.words(0), absl::StrCat("w", e.ids(0)));
    double mass = e.tail_mass();
    for (float p : e.probs()) mass += p;
    EXPECT_NEAR(mass, 1.0, 1e-4);  // exact: probabilities over all |V| plus the tail
    const auto& g = graph.results(i);
    double gsum = 0;
    for (float p : g.probs()) gsum += p;
    EXPECT_NEAR(gsum, 1.0, 1e-4);  // graph: renormalised over the k
    EXPECT_GT(g.stats().distance_evals(), 0u);
    for (uint32_t id : g.ids()) overlap += std::count(truth.begin(), truth.end(), id);
    // The logits are exact for the ids returned.
    for (int t = 0; t < g.ids_size(); ++t) {
      double z = layer_.b[g.ids(t)];
      for (uint32_t j = 0; j < kD; ++j) z += double{layer_.W[g.ids(t) * kD + j]} * h[i * kD + j];
      EXPECT_NEAR(g.logits(t), z, 1e-4);
    }
  }
  EXPECT_GE(overlap / 500, 0.95);  // precision@10 of the graph at ef 128 on |V| = 800
}

TEST_F(DecoderServiceTest, StreamTopKAnswersEveryStepInOrder) {
  ASSERT_OK(Load("lm", model_dir_).status());
  const std::vector<float> h = Contexts(30, 3);
  grpc::ClientContext ctx;
  auto stream = stub_->StreamTopK(&ctx);
  for (int i = 0; i < 30; ++i) {
    v1::TopKRequest req = Request("lm", std::vector<float>(h.begin() + i * kD, h.begin() + (i + 1) * kD), 5);
    req.set_exact(true);
    ASSERT_TRUE(stream->Write(req));
    v1::TopKResponse resp;
    ASSERT_TRUE(stream->Read(&resp));
    ASSERT_EQ(resp.results_size(), 1);
    EXPECT_EQ(resp.results(0).ids(0), BruteTopK(layer_, h.data() + i * kD, 1)[0]);
  }
  // A bad step ends the stream with its status.
  v1::TopKRequest bad = Request("lm", std::vector<float>(kD, 0.0f), 0);
  ASSERT_TRUE(stream->Write(bad));
  v1::TopKResponse resp;
  EXPECT_FALSE(stream->Read(&resp));
  grpc::Status st = stream->Finish();
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(st.error_message(), ::testing::HasSubstr("step 30"));
}

TEST_F(DecoderServiceTest, BadInputGetsClearStatusCodes) {
  ASSERT_OK(Load("lm", model_dir_).status());
  using absl::StatusCode;
  const std::vector<float> h = Contexts(1, 1);
  EXPECT_THAT(TopK(Request("lm", h, 0)).status(), StatusIs(StatusCode::kInvalidArgument));
  EXPECT_THAT(TopK(Request("lm", h, kV + 1)).status(), StatusIs(StatusCode::kInvalidArgument));
  EXPECT_THAT(TopK(Request("nope", h, 5)).status(), StatusIs(StatusCode::kNotFound));
  std::vector<float> short_h(kD - 1, 0.5f);
  v1::TopKRequest wrong_d;
  wrong_d.set_model("lm");
  wrong_d.set_k(5);
  wrong_d.add_contexts()->mutable_h()->Assign(short_h.begin(), short_h.end());
  EXPECT_THAT(TopK(wrong_d).status(), StatusIs(StatusCode::kInvalidArgument));
  std::vector<float> nan_h = h;
  nan_h[3] = NAN;
  EXPECT_THAT(TopK(Request("lm", nan_h, 5)).status(), StatusIs(StatusCode::kInvalidArgument));
  EXPECT_THAT(TopK(Request("lm", {}, 5)).status(), StatusIs(StatusCode::kInvalidArgument));
  // Loading: duplicate name, bad name, missing dir, mismatched files.
  EXPECT_THAT(Load("lm", model_dir_).status(), StatusIs(StatusCode::kAlreadyExists));
  EXPECT_THAT(Load("bad name", model_dir_).status(), StatusIs(StatusCode::kInvalidArgument));
  EXPECT_THAT(Load("missing", tmp_.File("nowhere")).status(),
              StatusIs(StatusCode::kInvalidArgument, ::testing::HasSubstr("does not exist")));
  const std::string broken = tmp_.File("broken");
  WriteModel(broken, layer_, /*w_rows=*/kV - 1);
  EXPECT_THAT(Load("broken", broken).status(),
              StatusIs(StatusCode::kInvalidArgument, ::testing::HasSubstr("W.f32")));
  // A failed load leaves nothing behind: the name can be used again.
  WriteModel(broken, layer_);
  EXPECT_OK(Load("broken", broken).status());
  // The server still serves.
  EXPECT_OK(TopK(Request("lm", h, 5)).status());
}

// Huge finite contexts (issue 14 #7): [3e38] * d used to return NaN logits
// and probabilities. Refused beyond the magnitude rule; accepted ones near
// it give finite answers.
TEST_F(DecoderServiceTest, HugeContextsAreRefusedAndLargeOnesStayFinite) {
  ASSERT_OK(Load("lm", model_dir_).status());
  const std::vector<float> huge(kD, 3e38f);
  EXPECT_THAT(TopK(Request("lm", huge, 5)).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       ::testing::AllOf(::testing::HasSubstr("context #0"),
                                        ::testing::HasSubstr("1e18"))));
  const std::vector<float> large(kD, 1e17f);  // norm 4e17
  for (bool exact : {false, true}) {
    v1::TopKRequest req = Request("lm", large, 5);
    req.set_return_probs(true);
    req.set_exact(exact);
    ASSERT_OK_AND_ASSIGN(v1::TopKResponse r, TopK(req));
    ASSERT_EQ(r.results_size(), 1);
    for (float z : r.results(0).logits()) EXPECT_TRUE(std::isfinite(z)) << exact;
    for (float p : r.results(0).probs()) EXPECT_TRUE(std::isfinite(p)) << exact;
    EXPECT_TRUE(std::isfinite(r.results(0).tail_mass())) << exact;
  }
}

TEST_F(DecoderServiceTest, Float16WeightsAreAccepted) {
  const std::string dir = tmp_.File("half");
  WriteModel(dir, layer_);
  std::filesystem::remove(dir + "/W.f32");
  // float -> binary16 by rounding through the exponent/mantissa (values here
  // are small normals).
  std::vector<uint16_t> half(layer_.W.size());
  Layer rounded = layer_;
  for (size_t i = 0; i < half.size(); ++i) {
    const float f = layer_.W[i];
    int e;
    const float m = std::frexp(std::abs(f), &e);  // f = m * 2^e, m in [0.5, 1)
    uint16_t bits = 0;
    if (f != 0 && e - 1 >= -14) {
      const int mant = static_cast<int>(std::lround((m * 2 - 1) * 1024));
      bits = static_cast<uint16_t>(((e - 1 + 15) << 10) + mant);  // mant 1024 carries into exp
    }
    if (f < 0) bits |= 0x8000;
    half[i] = bits;
    rounded.W[i] = server::HalfToFloat(bits);
  }
  WriteFile(dir + "/W.f16", half.data(), half.size() * 2);
  ASSERT_OK(Load("half", dir).status());
  const std::vector<float> h = Contexts(5, 4);
  v1::TopKRequest req = Request("half", h, 3);
  req.set_exact(true);
  ASSERT_OK_AND_ASSIGN(v1::TopKResponse resp, TopK(req));
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(resp.results(i).ids(0), BruteTopK(rounded, h.data() + i * kD, 1)[0]);
  }
}

TEST_F(DecoderServiceTest, UnloadAndTheGraphCacheOnReload) {
  ASSERT_OK_AND_ASSIGN(v1::ModelInfo first, Load("lm", model_dir_));
  EXPECT_FALSE(first.graph_from_cache());
  {
    grpc::ClientContext ctx;
    v1::UnloadModelRequest req;
    req.set_name("lm");
    v1::UnloadModelResponse resp;
    ASSERT_TRUE(stub_->UnloadModel(&ctx, req, &resp).ok());
  }
  EXPECT_THAT(TopK(Request("lm", Contexts(1, 1), 5)).status(),
              StatusIs(absl::StatusCode::kNotFound));
  ASSERT_OK_AND_ASSIGN(v1::ModelInfo second, Load("lm", model_dir_));
  EXPECT_TRUE(second.graph_from_cache());
  // The metrics count decoded contexts.
  ASSERT_OK(TopK(Request("lm", Contexts(4, 2), 5)).status());
  ASSERT_OK_AND_ASSIGN(std::string body,
                       testing::HttpGet("127.0.0.1", server_->metrics_port(), "/metrics"));
  EXPECT_THAT(body, ::testing::HasSubstr("zoomd_decoder_contexts_total 4"));
  EXPECT_THAT(body, ::testing::HasSubstr("zoomd_rpc_requests_total{code=\"OK\",rpc=\"TopK\"} 1"));
}

}  // namespace
}  // namespace zoom
