// The Decoder service end to end: a generated softmax layer written as a
// model directory, loaded by an in-process ZoomServer, used over gRPC.
#include <grpcpp/grpcpp.h>
#include <grpcpp/support/sync_stream.h>
#include <sys/stat.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>

#include "absl/strings/str_cat.h"
#include "client/decoder_client.h"
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

// Every call has a deadline: a server that hangs fails the test, not ctest.
void WithDeadline(grpc::ClientContext* ctx) {
  ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::minutes(2));
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
    o.models_dir = tmp_.path();  // model directories are named relative to it
    server_ = std::make_unique<server::ZoomServer>(o);
    ASSERT_OK(server_->Start());
    client::ClientOptions copts;
    copts.timeout = absl::Minutes(2);
    decoder_ = client::DecoderClient::Connect(absl::StrCat("127.0.0.1:", server_->grpc_port()),
                                              copts);
    channel_ = decoder_->channel();
  }
  // `dir` is a directory under tmp_ (the server's --models_dir), sent as
  // its name relative to it.
  absl::StatusOr<v1::ModelInfo> Load(const std::string& name, const std::string& dir) {
    return decoder_->LoadModel(
        name, std::filesystem::path(dir).lexically_relative(tmp_.path()).string(), /*wait=*/true);
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
  absl::StatusOr<v1::TopKResponse> TopK(const v1::TopKRequest& req) { return decoder_->TopK(req); }
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
  std::unique_ptr<client::DecoderClient> decoder_;
};

TEST_F(DecoderServiceTest, LoadListTopKExactAndGraphAgreeWithBruteForce) {
  ASSERT_OK_AND_ASSIGN(v1::ModelInfo info, Load("lm", model_dir_));
  EXPECT_EQ(info.state(), v1::SERVING);
  EXPECT_EQ(info.vocab_size(), kV);
  EXPECT_EQ(info.dim(), kD);
  EXPECT_GT(info.graph_bytes(), 0u);
  {
    ASSERT_OK_AND_ASSIGN(std::vector<v1::ModelInfo> list, decoder_->ListModels());
    ASSERT_EQ(list.size(), 1u);
    EXPECT_EQ(list[0].name(), "lm");
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
  auto stream = decoder_->OpenStream();
  for (int i = 0; i < 30; ++i) {
    v1::TopKRequest req = Request("lm", std::vector<float>(h.begin() + i * kD, h.begin() + (i + 1) * kD), 5);
    req.set_exact(true);
    ASSERT_OK_AND_ASSIGN(v1::TopKResponse resp, stream->Step(req));
    ASSERT_EQ(resp.results_size(), 1);
    EXPECT_EQ(resp.results(0).ids(0), BruteTopK(layer_, h.data() + i * kD, 1)[0]);
  }
  // A bad step ends the stream with its status.
  v1::TopKRequest bad = Request("lm", std::vector<float>(kD, 0.0f), 0);
  EXPECT_THAT(stream->Step(bad).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, ::testing::HasSubstr("step 30")));
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
              StatusIs(StatusCode::kNotFound, ::testing::HasSubstr("does not exist")));
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

// TopKRequest.tail picks the estimate: the default is the clusters' (or
// the sample when tail_samples > 0, as before the field existed), NONE
// gives 0, SAMPLE over every word is the exact tail; an unknown value is
// refused with the values that exist.
TEST_F(DecoderServiceTest, TailEstimatesThroughTheService) {
  ASSERT_OK(Load("lm", model_dir_).status());
  const std::vector<float> h = Contexts(20, 21);
  auto run = [&](v1::TailEstimate tail, uint32_t samples) {
    v1::TopKRequest req = Request("lm", h, 10);
    req.set_return_probs(true);
    req.set_ef(64);
    req.set_tail(tail);
    req.set_tail_samples(samples);
    return TopK(req);
  };
  ASSERT_OK_AND_ASSIGN(v1::TopKResponse def, run(v1::TAIL_ESTIMATE_DEFAULT, 0));
  ASSERT_OK_AND_ASSIGN(v1::TopKResponse clusters, run(v1::TAIL_ESTIMATE_CLUSTERS, 0));
  ASSERT_OK_AND_ASSIGN(v1::TopKResponse none, run(v1::TAIL_ESTIMATE_NONE, 0));
  ASSERT_OK_AND_ASSIGN(v1::TopKResponse all, run(v1::TAIL_ESTIMATE_SAMPLE, kV));
  ASSERT_OK_AND_ASSIGN(v1::TopKResponse old_style, run(v1::TAIL_ESTIMATE_DEFAULT, kV));
  double err = 0;
  for (int i = 0; i < 20; ++i) {
    EXPECT_EQ(def.results(i).tail_mass(), clusters.results(i).tail_mass());
    EXPECT_EQ(none.results(i).tail_mass(), 0.0f);
    EXPECT_EQ(old_style.results(i).tail_mass(), all.results(i).tail_mass());
    // The exact tail outside the returned ids, from the brute-force logits.
    std::vector<double> z(kV);
    double m = -1e300;
    for (uint32_t w = 0; w < kV; ++w) {
      z[w] = layer_.b[w];
      for (uint32_t j = 0; j < kD; ++j) z[w] += double{layer_.W[w * kD + j]} * h[i * kD + j];
      m = std::max(m, z[w]);
    }
    double total = 0, inside = 0;
    for (double v : z) total += std::exp(v - m);
    for (uint32_t id : all.results(i).ids()) inside += std::exp(z[id] - m);
    const double tail = 1.0 - inside / total;
    EXPECT_NEAR(all.results(i).tail_mass(), tail, 1e-4);
    err += std::abs(clusters.results(i).tail_mass() - tail);
  }
  EXPECT_LT(err / 20, 0.05);
  EXPECT_THAT(run(static_cast<v1::TailEstimate>(7), 0).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       ::testing::HasSubstr("not a TailEstimate")));
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

// A model directory with H.f32 gets its default ef measured at load: the
// smallest grid ef whose P@1 and P@5 on those contexts reach the targets,
// and a TopK with ef 0 runs at it (k ≤ 5; scaled by k/5 above).
TEST_F(DecoderServiceTest, DefaultEfIsCalibratedOnTheModelDirectorysContexts) {
  const std::string dir = tmp_.File("calibrated");
  WriteModel(dir, layer_);
  constexpr uint32_t kN = 300;
  const std::vector<float> h = Contexts(kN, 21);
  WriteFile(dir + "/H.f32", h.data(), h.size() * 4);
  ASSERT_OK_AND_ASSIGN(v1::ModelInfo info, Load("cal", dir));
  EXPECT_EQ(info.default_ef_source(), "calibrated") << info.calibration_error();
  EXPECT_EQ(info.calibration_error(), "");
  EXPECT_EQ(info.calibration_contexts(), kN);
  EXPECT_GE(info.calibration_p1(), server::kDefaultEfP1);
  EXPECT_GE(info.calibration_p5(), server::kDefaultEfP5);
  EXPECT_THAT(std::vector<uint32_t>(std::begin(server::kDefaultEfGrid),
                                    std::end(server::kDefaultEfGrid)),
              ::testing::Contains(info.default_ef()));
  // The same contexts through TopK at ef 0: the ef that ran is the default,
  // and the precision is the calibration's (brute force in double here, a
  // near-tie within 1e-4 allowed to fall either way: one context of slack).
  v1::TopKRequest req = Request("cal", h, 5);
  ASSERT_OK_AND_ASSIGN(v1::TopKResponse resp, TopK(req));
  ASSERT_EQ(resp.results_size(), static_cast<int>(kN));
  double p1 = 0, p5 = 0;
  for (uint32_t i = 0; i < kN; ++i) {
    const auto& r = resp.results(i);
    EXPECT_EQ(r.stats().ef(), info.default_ef());
    const std::vector<uint32_t> truth = BruteTopK(layer_, h.data() + i * kD, 5);
    p1 += r.ids(0) == truth[0];
    for (uint32_t id : r.ids()) p5 += std::count(truth.begin(), truth.end(), id) / 5.0;
  }
  EXPECT_NEAR(p1 / kN, info.calibration_p1(), 1.0 / kN + 1e-9);
  EXPECT_NEAR(p5 / kN, info.calibration_p5(), 1.0 / kN + 1e-9);
  req.set_k(20);
  req.mutable_contexts()->DeleteSubrange(1, kN - 1);
  ASSERT_OK_AND_ASSIGN(resp, TopK(req));
  EXPECT_EQ(resp.results(0).stats().ef(), std::max(20u, info.default_ef() * 20 / 5));
  req.set_ef(40);  // the request's own ef wins
  ASSERT_OK_AND_ASSIGN(resp, TopK(req));
  EXPECT_EQ(resp.results(0).stats().ef(), 40u);
  req.set_exact(true);
  ASSERT_OK_AND_ASSIGN(resp, TopK(req));
  EXPECT_EQ(resp.results(0).stats().ef(), 0u);
}

// Without H.f32 the built-in max(64, k) stays and says why; a default asked
// for at load wins over a calibration; a bad H.f32 (wrong size, non-finite
// or huge values, a FIFO, a symlink out of the models directory) is a
// warning, never a failed or hung load.
TEST_F(DecoderServiceTest, DefaultEfFromTheRequestOrBuiltInAndBadContextFiles) {
  ASSERT_OK_AND_ASSIGN(v1::ModelInfo plain, Load("plain", model_dir_));
  EXPECT_EQ(plain.default_ef(), 0u);
  EXPECT_EQ(plain.default_ef_source(), "builtin");
  EXPECT_THAT(plain.calibration_error(), ::testing::HasSubstr("H.f32"));
  const std::vector<float> h = Contexts(4, 3);
  {
    v1::TopKRequest req = Request("plain", h, 10);
    ASSERT_OK_AND_ASSIGN(v1::TopKResponse resp, TopK(req));
    EXPECT_EQ(resp.results(0).stats().ef(), 64u);
    req.set_k(100);
    ASSERT_OK_AND_ASSIGN(resp, TopK(req));
    EXPECT_EQ(resp.results(0).stats().ef(), 100u);
  }
  const std::string rel_dir =
      std::filesystem::path(model_dir_).lexically_relative(tmp_.path()).string();
  const std::string with_h = tmp_.File("with_h");
  WriteModel(with_h, layer_);
  WriteFile(with_h + "/H.f32", h.data(), h.size() * 4);
  ASSERT_OK_AND_ASSIGN(v1::ModelInfo asked,
                       decoder_->LoadModel("asked", "with_h", true, 0, 0, /*default_ef=*/24));
  EXPECT_EQ(asked.default_ef(), 24u);
  EXPECT_EQ(asked.default_ef_source(), "request");
  EXPECT_EQ(asked.calibration_contexts(), 0u);  // not measured
  {
    ASSERT_OK_AND_ASSIGN(v1::TopKResponse resp, TopK(Request("asked", h, 3)));
    EXPECT_EQ(resp.results(0).stats().ef(), 24u);
  }
  EXPECT_THAT(decoder_->LoadModel("over", rel_dir, true, 0, 0, 10001).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, ::testing::HasSubstr("default_ef")));

  TempDir outside;
  WriteFile(outside.File("H.f32"), h.data(), h.size() * 4);
  std::vector<float> huge = h;
  huge[kD + 3] = 1e30f;
  std::vector<float> nan = h;
  nan[2 * kD] = NAN;
  struct Case {
    const char* name;
    std::function<void(const std::string&)> write;
    const char* says;
  } cases[] = {
      {"short", [&](const std::string& f) { WriteFile(f, h.data(), kD * 4 - 4); },
       "not a positive multiple of 64"},
      {"empty", [&](const std::string& f) { WriteFile(f, h.data(), 0); }, "multiple"},
      {"huge", [&](const std::string& f) { WriteFile(f, huge.data(), huge.size() * 4); },
       "context #1"},
      {"nan", [&](const std::string& f) { WriteFile(f, nan.data(), nan.size() * 4); },
       "context #2"},
      {"fifo", [](const std::string& f) { ASSERT_EQ(mkfifo(f.c_str(), 0600), 0); },
       "not a regular file"},
      {"symlink",
       [&](const std::string& f) { std::filesystem::create_symlink(outside.File("H.f32"), f); },
       ""},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const std::string dir = tmp_.File(c.name);
    WriteModel(dir, layer_);
    c.write(dir + "/H.f32");
    ASSERT_OK_AND_ASSIGN(v1::ModelInfo info, Load(c.name, dir));
    EXPECT_EQ(info.state(), v1::SERVING);
    EXPECT_EQ(info.default_ef(), 0u);
    EXPECT_EQ(info.default_ef_source(), "builtin");
    EXPECT_NE(info.calibration_error(), "");
    EXPECT_THAT(info.calibration_error(), ::testing::HasSubstr(c.says));
    EXPECT_THAT(info.calibration_error(), ::testing::Not(::testing::HasSubstr(outside.path())));
    ASSERT_OK(TopK(Request(c.name, h, 5)).status());
  }
}

TEST_F(DecoderServiceTest, UnloadAndTheGraphCacheOnReload) {
  ASSERT_OK_AND_ASSIGN(v1::ModelInfo first, Load("lm", model_dir_));
  EXPECT_FALSE(first.graph_from_cache());
  ASSERT_OK(decoder_->UnloadModel("lm"));
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

namespace zoom {
namespace {

// ---- Hardening: model directories (issue 14 #3, #4, #5, #12, #7) ---------------

// Threads of this process (the in-process server's included).
int ThreadCount() {
  int n = 0;
  for (const auto& e : std::filesystem::directory_iterator("/proc/self/task")) {
    (void)e;
    ++n;
  }
  return n;
}

class ModelsDirTest : public DecoderServiceTest {
 protected:
  absl::StatusOr<v1::ModelInfo> LoadNamed(const std::string& name, const std::string& dir,
                                          bool wait = true) {
    return decoder_->LoadModel(name, dir, wait);
  }
  absl::Status Unload(const std::string& name) { return decoder_->UnloadModel(name); }
  std::vector<v1::ModelInfo> List() {
    auto list = decoder_->ListModels();
    EXPECT_OK(list.status());
    return list.ok() ? *list : std::vector<v1::ModelInfo>();
  }
  void WriteText(const std::string& path, const std::string& text) {
    std::ofstream out(path);
    out << text;
  }
};

// A 38-byte meta.json claiming 2^26 x 65536 with empty files used to throw
// bad_alloc in the loader thread and kill the server: sizes are checked
// before anything is allocated.
TEST_F(ModelsDirTest, HugeClaimsAreRefusedBeforeAllocating) {
  const std::string dir = tmp_.File("huge");
  std::filesystem::create_directories(dir);
  WriteText(dir + "/meta.json", R"({"vocab_size":67108864,"dim":65536})");
  for (const char* f : {"/W.f32", "/b.f32", "/vocab.txt"}) WriteText(dir + f, "");
  EXPECT_THAT(LoadNamed("huge", "huge").status(),
              StatusIs(absl::StatusCode::kInvalidArgument, ::testing::HasSubstr("W.f32")));
  // A claim whose files do have the sizes (sparse, 4 GiB of W) passes the
  // size checks and is refused by the memory budget before it is read.
  const std::string big = tmp_.File("big");
  std::filesystem::create_directories(big);
  constexpr uint64_t kV = 1 << 22, kD = 256;  // 4 GiB of W: about 8.6 GiB loaded
  WriteText(big + "/meta.json", absl::StrCat("{\"vocab_size\": ", kV, ", \"dim\": ", kD, "}"));
  WriteText(big + "/W.f32", "");
  std::filesystem::resize_file(big + "/W.f32", kV * kD * 4);
  WriteText(big + "/b.f32", "");
  std::filesystem::resize_file(big + "/b.f32", kV * 4);
  WriteText(big + "/vocab.txt", "");
  std::filesystem::resize_file(big + "/vocab.txt", kV * 2);
  EXPECT_THAT(LoadNamed("big", "big").status(),
              StatusIs(absl::StatusCode::kResourceExhausted,
                       ::testing::HasSubstr("--max_model_bytes")));
  // "vocab_size": 2.5 is not 2.
  const std::string frac = tmp_.File("frac");
  WriteModel(frac, layer_);
  WriteText(frac + "/meta.json", R"({"vocab_size": 2.5, "dim": 16})");
  EXPECT_THAT(LoadNamed("frac", "frac").status(),
              StatusIs(absl::StatusCode::kInvalidArgument, ::testing::HasSubstr("integer")));
  EXPECT_OK(LoadNamed("lm", "model").status());  // the server still serves
}

// A FIFO named meta.json used to pin the model in LOADING forever (and
// block Unload, Load of the name and SIGTERM): only regular files are
// opened, never blocking.
TEST_F(ModelsDirTest, FifoAndOtherNonRegularFilesAreRefused) {
  const std::string dir = tmp_.File("fifo");
  WriteModel(dir, layer_);
  std::filesystem::remove(dir + "/meta.json");
  ASSERT_EQ(mkfifo((dir + "/meta.json").c_str(), 0600), 0);
  EXPECT_THAT(LoadNamed("fifo", "fifo").status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       ::testing::HasSubstr("not a regular file")));
  // Without waiting: the load fails in the background (a bounded wait for
  // it), and its name is free.
  ASSERT_OK_AND_ASSIGN(v1::ModelInfo started, LoadNamed("fifo", "fifo", /*wait=*/false));
  EXPECT_NE(started.state(), v1::SERVING);
  bool failed = false;
  for (absl::Time end = absl::Now() + absl::Seconds(60); !failed && absl::Now() < end;) {
    for (const auto& m : List()) failed |= m.name() == "fifo" && m.state() == v1::MODEL_FAILED;
    if (!failed) absl::SleepFor(absl::Milliseconds(10));
  }
  EXPECT_TRUE(failed);
  // A directory in a file's place.
  const std::string d2 = tmp_.File("dirfile");
  WriteModel(d2, layer_);
  std::filesystem::remove(d2 + "/vocab.txt");
  std::filesystem::create_directories(d2 + "/vocab.txt");
  EXPECT_THAT(LoadNamed("dirfile", "dirfile").status(),
              StatusIs(absl::StatusCode::kInvalidArgument));
  // The name of a failed load can be used again.
  EXPECT_OK(LoadNamed("fifo", "model").status());
  EXPECT_OK(Unload("fifo"));
}

// LoadModel used to read any file the server could: a model dir whose
// vocab.txt was a symlink to a mode-0600 file returned its lines as words.
// Names only, resolved beneath --models_dir; symlinks leading out refused;
// messages reveal nothing outside.
TEST_F(ModelsDirTest, NothingOutsideTheModelsDirectoryIsRead) {
  TempDir outside;
  const std::string secret = outside.File("secret.txt");
  {
    std::ofstream out(secret);
    for (uint32_t i = 0; i < kV; ++i) out << "secret" << i << "\n";
  }
  chmod(secret.c_str(), 0600);
  const std::string dir = tmp_.File("leak");
  WriteModel(dir, layer_);
  std::filesystem::remove(dir + "/vocab.txt");
  std::filesystem::create_symlink(secret, dir + "/vocab.txt");
  auto st = LoadNamed("leak", "leak").status();
  EXPECT_THAT(st, StatusIs(absl::StatusCode::kPermissionDenied));
  EXPECT_THAT(std::string(st.message()), ::testing::Not(::testing::HasSubstr(outside.path())));
  // The same for W.f32 (it was NOT_FOUND: "neither W.f32 nor W.f16").
  const std::string wdir = tmp_.File("wleak");
  WriteModel(wdir, layer_);
  std::filesystem::rename(wdir + "/W.f32", outside.File("W.f32"));
  std::filesystem::create_symlink(outside.File("W.f32"), wdir + "/W.f32");
  st = LoadNamed("wleak", "wleak").status();
  EXPECT_THAT(st, StatusIs(absl::StatusCode::kPermissionDenied));
  EXPECT_THAT(std::string(st.message()), ::testing::Not(::testing::HasSubstr(outside.path())));
  // A whole model directory symlinked from outside.
  WriteModel(outside.File("m"), layer_);
  std::filesystem::create_symlink(outside.File("m"), tmp_.File("linked"));
  EXPECT_THAT(LoadNamed("linked", "linked").status(),
              StatusIs(absl::StatusCode::kPermissionDenied));
  // Paths instead of names.
  for (const std::string& bad : {outside.File("m"), std::string("../m"), std::string("a/../model"),
                                 std::string("model/"), std::string("")}) {
    SCOPED_TRACE(bad);
    EXPECT_THAT(LoadNamed("p", bad).status(), StatusIs(absl::StatusCode::kInvalidArgument));
  }
  // A missing directory is NOT_FOUND (it was INVALID_ARGUMENT), and says so
  // only for names under the root.
  EXPECT_THAT(LoadNamed("nope", "nope").status(), StatusIs(absl::StatusCode::kNotFound));
  // A relative symlink that stays inside is followed.
  std::filesystem::create_directory_symlink("model", tmp_.File("alias"));
  ASSERT_OK_AND_ASSIGN(v1::ModelInfo ok, LoadNamed("alias", "alias"));
  EXPECT_EQ(ok.state(), v1::SERVING);
  EXPECT_EQ(ok.dir(), "alias");
}

// Each LoadModel used to leak a thread (never joined): ~32,500 failing
// loads exhausted vm.max_map_count. Loads run on fixed loader threads; the
// number of models is capped; a failed load keeps no name taken.
TEST_F(ModelsDirTest, FailingLoadsLeakNoThreadsAndModelsAreCapped) {
  ASSERT_OK(LoadNamed("warm", "nope", /*wait=*/false).status());
  const int threads_before = ThreadCount();
  // One at a time (waited for), so that how fast the loader runs does not
  // matter: each fails NOT_FOUND and leaves nothing behind.
  for (int i = 0; i < 300; ++i) {
    ASSERT_THAT(LoadNamed(absl::StrCat("f", i % 20), "nope").status(),
                StatusIs(absl::StatusCode::kNotFound, ::testing::HasSubstr("does not exist")));
  }
  // A leak would add a thread per load (300); gRPC itself grows its own
  // pools by a few threads under load, which is not ours to count.
  EXPECT_LE(ThreadCount(), threads_before + 64);
  // A background load that fails stays listed with its error.
  ASSERT_OK(LoadNamed("bg", "nope", /*wait=*/false).status());
  bool listed = false;
  for (absl::Time end = absl::Now() + absl::Seconds(60); !listed && absl::Now() < end;) {
    for (const auto& m : List()) {
      listed |= m.name() == "bg" && m.state() == v1::MODEL_FAILED &&
                m.error().find("does not exist") != std::string::npos;
    }
    if (!listed) absl::SleepFor(absl::Milliseconds(10));
  }
  EXPECT_TRUE(listed);
  // The failed names are free; the default cap is 16 loading or serving.
  for (int i = 0; i < 16; ++i) {
    ASSERT_OK(LoadNamed(absl::StrCat("f", i), "model", /*wait=*/false).status()) << i;
  }
  EXPECT_THAT(LoadNamed("one_more", "model", /*wait=*/false).status(),
              StatusIs(absl::StatusCode::kResourceExhausted, ::testing::HasSubstr("unload")));
  // Unload works in any state (a load in progress is cancelled) and frees
  // a place.
  EXPECT_OK(Unload("f3"));
  EXPECT_OK(LoadNamed("one_more", "model").status());
}

// A step that does not parse used to end the stream OK after the good
// steps; it is INVALID_ARGUMENT naming the step.
TEST_F(ModelsDirTest, StreamTopKStepThatDoesNotParseEndsTheStreamWithItsIndex) {
  ASSERT_OK(LoadNamed("lm", "model").status());
  grpc::ClientContext ctx;
  WithDeadline(&ctx);
  auto stream = grpc::internal::ClientReaderWriterFactory<grpc::ByteBuffer, grpc::ByteBuffer>::
      Create(channel_.get(),
             grpc::internal::RpcMethod("/zoom.v1.Decoder/StreamTopK",
                                       grpc::internal::RpcMethod::BIDI_STREAMING),
             &ctx);
  auto bytes = [](const std::string& s) {
    grpc::Slice slice(s);
    return grpc::ByteBuffer(&slice, 1);
  };
  std::string good;
  Request("lm", Contexts(1, 3), 5).SerializeToString(&good);
  ASSERT_TRUE(stream->Write(bytes(good)));
  grpc::ByteBuffer answer;
  ASSERT_TRUE(stream->Read(&answer));
  ASSERT_TRUE(stream->Write(bytes(std::string("\x0a\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff", 11))));
  EXPECT_FALSE(stream->Read(&answer));
  const grpc::Status st = stream->Finish();
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(st.error_message(), ::testing::HasSubstr("step 1"));
  EXPECT_THAT(st.error_message(), ::testing::HasSubstr("could not be parsed"));
}

}  // namespace
}  // namespace zoom

namespace zoom {
namespace {

// The decode step belongs to the engine: validated there, and the call's
// deadline and cancellation reach the work (they used to be dropped).
TEST_F(DecoderServiceTest, TheEngineOwnsTheStepAndSeesTheDeadlineAndTheCancel) {
  server::DecoderOptions options;
  options.models_dir = tmp_.path();
  options.limits.max_contexts = 100;
  server::DecoderEngine engine(options);
  ASSERT_OK_AND_ASSIGN(auto model,
                       engine.Load("lm", std::filesystem::path(model_dir_).filename().string(),
                                   index::FgdOptions()));
  ASSERT_OK(engine.Wait(model));
  const std::vector<float> h = Contexts(70, 5);
  server::TopKRequest req;
  req.model = "lm";
  for (size_t i = 0; i < 70; ++i) req.contexts.emplace_back(h.data() + i * kD, kD);
  req.k = 5;
  req.with_words = true;
  std::vector<server::TopKAnswer> answers;
  server::TopKStats stats;
  ASSERT_OK(engine.TopK(req, server::CallContext(), &answers, &stats));
  ASSERT_EQ(answers.size(), 70u);
  EXPECT_EQ(stats.contexts, 70u);
  EXPECT_EQ(answers[0].words.size(), 5u);
  EXPECT_TRUE(answers[0].probs.empty());  // not asked for
  // A deadline already past, a cancelled call: stopped, saying where.
  server::CallContext past;
  past.deadline = absl::InfinitePast();
  EXPECT_THAT(engine.TopK(req, past, &answers, &stats),
              StatusIs(absl::StatusCode::kDeadlineExceeded, ::testing::HasSubstr("0 of 70")));
  std::atomic<bool> cancelled{true};
  server::CallContext cancel;
  cancel.cancelled = &cancelled;
  EXPECT_THAT(engine.TopK(req, cancel, &answers, &stats),
              StatusIs(absl::StatusCode::kCancelled));
  // The limits are the engine's.
  for (size_t i = 0; i < 40; ++i) req.contexts.emplace_back(h.data(), kD);
  EXPECT_THAT(engine.TopK(req, server::CallContext(), &answers, &stats),
              StatusIs(absl::StatusCode::kInvalidArgument, ::testing::HasSubstr("limit is 100")));
  req.contexts.resize(1);
  req.contexts[0] = absl::Span<const float>(h.data(), kD - 1);
  EXPECT_THAT(engine.TopK(req, server::CallContext(), &answers, &stats),
              StatusIs(absl::StatusCode::kInvalidArgument, ::testing::HasSubstr("context #0")));
}

}  // namespace
}  // namespace zoom
