// grpc.health.v1.Health and server reflection (v1, v1alpha) as zoomd serves
// them itself (server/grpc/health_service.h, reflection_service.h): bytes
// that do not parse are INVALID_ARGUMENT on every stream (issue 45, case
// 6), v1alpha answers generic clients, Watch follows the status and ends at
// shutdown. Raw bytes go through grpc::GenericStub; every wait is bounded
// and every port is the OS's choice.
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include <chrono>
#include <fstream>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "client/zoom_client.h"
#include "gmock/gmock.h"
#include "google/protobuf/descriptor.pb.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "grpc/reflection/v1/reflection.pb.h"
#include "grpc/reflection/v1alpha/reflection.pb.h"
#include "gtest/gtest.h"
#include "server/grpc/health_service.h"
#include "server/grpc/zoom_server.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/test_env.h"

namespace zoom {
namespace {

using ::testing::HasSubstr;
using ::zoom::testing::StatusIs;
using ::zoom::testing::TempDir;
using Health = grpc::health::v1::HealthCheckResponse;

// Bytes that no protobuf parser accepts (a truncated varint in field 1), and
// a message whose string field 1 is not UTF-8.
const std::string kJunk("\x0a\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff", 11);
const std::string kBadUtf8("\x0a\x02\xc3\x28", 4);

constexpr char kV1[] = "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo";
constexpr char kV1alpha[] = "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo";
constexpr char kWatch[] = "/grpc.health.v1.Health/Watch";
constexpr char kCheck[] = "/grpc.health.v1.Health/Check";

template <typename M>
std::string Serialized(const M& m) {
  std::string out;
  m.SerializeToString(&out);
  return out;
}

std::string HealthRequest(const std::string& service) {
  grpc::health::v1::HealthCheckRequest req;
  req.set_service(service);
  return Serialized(req);
}

// One call of any method over grpc::GenericStub: raw bytes out and in (any
// call shape: a unary or server-streaming method reads the one message
// written before WritesDone). One operation in flight at a time, each
// waited for at most 60 s (a wait that runs out fails the operation).
class RawCall {
 public:
  RawCall(const std::shared_ptr<grpc::Channel>& channel, const std::string& method,
          const std::string& api_key = "")
      : stub_(channel) {
    ctx_.set_deadline(std::chrono::system_clock::now() + std::chrono::minutes(3));
    if (!api_key.empty()) ctx_.AddMetadata("authorization", absl::StrCat("Bearer ", api_key));
    call_ = stub_.PrepareCall(&ctx_, method, &cq_);
    call_->StartCall(this);
    started_ = Await();
  }
  ~RawCall() {
    if (!finished_) {
      ctx_.TryCancel();
      if (!timed_out_) Finish();
    }
    cq_.Shutdown();
    void* tag;
    bool ok;
    while (cq_.Next(&tag, &ok)) {
    }
  }
  RawCall(const RawCall&) = delete;
  RawCall& operator=(const RawCall&) = delete;

  bool started() const { return started_; }
  bool Write(const std::string& bytes) {
    if (timed_out_) return false;
    grpc::Slice slice(bytes);
    grpc::ByteBuffer buf(&slice, 1);
    call_->Write(buf, this);
    return Await();
  }
  bool WritesDone() {
    if (timed_out_) return false;
    call_->WritesDone(this);
    return Await();
  }
  // The next message; nullopt at the end of the stream.
  std::optional<std::string> Read() {
    if (timed_out_) return std::nullopt;
    grpc::ByteBuffer buf;
    call_->Read(&buf, this);
    if (!Await()) return std::nullopt;
    std::vector<grpc::Slice> slices;
    if (!buf.Dump(&slices).ok()) return std::nullopt;
    std::string out;
    for (const grpc::Slice& s : slices) {
      out.append(reinterpret_cast<const char*>(s.begin()), s.size());
    }
    return out;
  }
  // The next message parsed as an M (a default M at the end of the stream).
  template <typename M>
  std::optional<M> ReadAs() {
    std::optional<std::string> bytes = Read();
    if (!bytes.has_value()) return std::nullopt;
    M m;
    if (!m.ParseFromString(*bytes)) return std::nullopt;
    return m;
  }
  grpc::Status Finish() {
    finished_ = true;
    if (timed_out_) return grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED, "test: timed out");
    grpc::Status st;
    call_->Finish(&st, this);
    if (!Await() && timed_out_) {
      return grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED, "test: Finish timed out");
    }
    return st;
  }
  bool timed_out() const { return timed_out_; }

 private:
  bool Await() {
    void* tag = nullptr;
    bool ok = false;
    const auto r =
        cq_.AsyncNext(&tag, &ok, std::chrono::system_clock::now() + std::chrono::seconds(60));
    if (r != grpc::CompletionQueue::GOT_EVENT) {
      timed_out_ = true;
      return false;
    }
    return ok;
  }

  grpc::CompletionQueue cq_;
  grpc::ClientContext ctx_;
  grpc::GenericStub stub_;
  std::unique_ptr<grpc::GenericClientAsyncReaderWriter> call_;
  bool started_ = false;
  bool finished_ = false;
  bool timed_out_ = false;
};

// A unary call's status with `request` as its bytes.
grpc::Status RawUnary(const std::shared_ptr<grpc::Channel>& channel, const std::string& method,
                      const std::string& request, std::string* response = nullptr) {
  RawCall call(channel, method);
  call.Write(request);
  call.WritesDone();
  std::optional<std::string> resp = call.Read();
  if (resp.has_value() && response != nullptr) *response = *resp;
  return call.Finish();
}

// A zoomd in this process on OS-chosen ports with a fresh data dir.
struct InProcess {
  explicit InProcess(const std::string& api_key_file = "") {
    server::ServerOptions o;
    o.database.data_dir = dir.File("data");
    o.grpc_address = "127.0.0.1:0";
    o.metrics_address = "127.0.0.1:0";
    o.threads = 2;
    o.api_key_file = api_key_file;
    server = std::make_unique<server::ZoomServer>(o);
    status = server->Start();
    if (status.ok()) {
      client = client::ZoomClient::Connect(absl::StrCat("127.0.0.1:", server->grpc_port()),
                                           client::ClientOptions());
    }
  }
  std::shared_ptr<grpc::Channel> channel() const { return client->channel(); }
  TempDir dir;
  std::unique_ptr<server::ZoomServer> server;
  absl::Status status;
  std::unique_ptr<client::ZoomClient> client;
};

grpc::reflection::v1::ServerReflectionRequest ListServices() {
  grpc::reflection::v1::ServerReflectionRequest req;
  req.set_list_services("");
  return req;
}

// ---- Reflection --------------------------------------------------------------

// Junk on either version ends the stream INVALID_ARGUMENT naming the
// message (it ended OK with no answer); the answers before it stay sent.
TEST(HealthReflectionTest, JunkOnReflectionV1AndV1alphaIsInvalidArgument) {
  InProcess s;
  ASSERT_OK(s.status);
  for (const auto& [method, type] :
       {std::pair{kV1, "grpc.reflection.v1.ServerReflectionRequest"},
        std::pair{kV1alpha, "grpc.reflection.v1alpha.ServerReflectionRequest"}}) {
    SCOPED_TRACE(method);
    for (const std::string& junk : {kJunk, kBadUtf8}) {
      // First message: nothing answered.
      {
        RawCall call(s.channel(), method);
        ASSERT_TRUE(call.started());
        call.Write(junk);
        EXPECT_FALSE(call.Read().has_value());
        const grpc::Status st = call.Finish();
        EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << st.error_message();
        EXPECT_THAT(st.error_message(),
                    HasSubstr(absl::StrCat("message #0 could not be parsed as a ", type)));
      }
      // After two answered requests.
      RawCall call(s.channel(), method);
      ASSERT_TRUE(call.started());
      for (int i = 0; i < 2; ++i) {
        ASSERT_TRUE(call.Write(Serialized(ListServices())));
        auto resp = call.ReadAs<grpc::reflection::v1::ServerReflectionResponse>();
        ASSERT_TRUE(resp.has_value());
        EXPECT_GE(resp->list_services_response().service_size(), 5);
      }
      call.Write(junk);
      EXPECT_FALSE(call.Read().has_value());
      const grpc::Status st = call.Finish();
      EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << st.error_message();
      EXPECT_THAT(st.error_message(),
                  HasSubstr(absl::StrCat("message #2 could not be parsed as a ", type)));
    }
  }
}

// v1alpha, zoomd's own now, in its own message types: list_services names
// every service, and its own file (and a method's) can be fetched.
TEST(HealthReflectionTest, V1alphaListsAndDescribesServices) {
  namespace ra = grpc::reflection::v1alpha;
  InProcess s;
  ASSERT_OK(s.status);
  RawCall call(s.channel(), kV1alpha);
  ASSERT_TRUE(call.started());
  ra::ServerReflectionRequest list;
  list.set_host("localhost");
  list.set_list_services("*");
  ASSERT_TRUE(call.Write(Serialized(list)));
  auto listed = call.ReadAs<ra::ServerReflectionResponse>();
  ASSERT_TRUE(listed.has_value());
  EXPECT_EQ(listed->valid_host(), "localhost");
  EXPECT_EQ(listed->original_request().list_services(), "*");
  std::set<std::string> names;
  for (const auto& sv : listed->list_services_response().service()) names.insert(sv.name());
  EXPECT_EQ(names, (std::set<std::string>{"zoom.v1.VectorSearch", "zoom.v1.Decoder",
                                          "grpc.health.v1.Health",
                                          "grpc.reflection.v1.ServerReflection",
                                          "grpc.reflection.v1alpha.ServerReflection"}));
  for (const auto& [symbol, file, package] :
       {std::tuple{"grpc.reflection.v1alpha.ServerReflection",
                   "grpc/reflection/v1alpha/reflection.proto", "grpc.reflection.v1alpha"},
        std::tuple{"grpc.health.v1.Health.Watch", "grpc/health/v1/health.proto",
                   "grpc.health.v1"}}) {
    SCOPED_TRACE(symbol);
    ra::ServerReflectionRequest req;
    req.set_file_containing_symbol(symbol);
    ASSERT_TRUE(call.Write(Serialized(req)));
    auto resp = call.ReadAs<ra::ServerReflectionResponse>();
    ASSERT_TRUE(resp.has_value());
    ASSERT_TRUE(resp->has_file_descriptor_response()) << resp->error_response().error_message();
    bool found = false;
    for (const std::string& bytes : resp->file_descriptor_response().file_descriptor_proto()) {
      google::protobuf::FileDescriptorProto fd;
      ASSERT_TRUE(fd.ParseFromString(bytes));
      if (fd.name() != file) continue;
      found = true;
      EXPECT_EQ(fd.package(), package);
      ASSERT_EQ(fd.service_size(), 1);
    }
    EXPECT_TRUE(found) << file;
  }
  ra::ServerReflectionRequest missing;
  missing.set_file_by_filename("nope.proto");
  ASSERT_TRUE(call.Write(Serialized(missing)));
  auto resp = call.ReadAs<ra::ServerReflectionResponse>();
  ASSERT_TRUE(resp.has_value());
  EXPECT_EQ(resp->error_response().error_code(), static_cast<int>(grpc::StatusCode::NOT_FOUND));
  ASSERT_TRUE(call.WritesDone());
  EXPECT_FALSE(call.Read().has_value());
  EXPECT_TRUE(call.Finish().ok());
}

// With API keys both reflection versions need a read key; Health stays
// open.
TEST(HealthReflectionTest, ReflectionNeedsAReadKeyHealthStaysOpen) {
  TempDir keys;
  const std::string read_key = "read-key-0123456789abcdef";
  {
    std::ofstream out(keys.File("keys"));
    out << "admin admin-key-0123456789abcdef\nread " << read_key << "\n";
  }
  InProcess s(keys.File("keys"));
  ASSERT_OK(s.status);
  for (const char* method : {kV1, kV1alpha}) {
    SCOPED_TRACE(method);
    {
      RawCall call(s.channel(), method);
      call.Write(Serialized(ListServices()));
      EXPECT_FALSE(call.Read().has_value());
      EXPECT_EQ(call.Finish().error_code(), grpc::StatusCode::UNAUTHENTICATED);
    }
    RawCall call(s.channel(), method, read_key);
    ASSERT_TRUE(call.Write(Serialized(ListServices())));
    auto resp = call.ReadAs<grpc::reflection::v1::ServerReflectionResponse>();
    ASSERT_TRUE(resp.has_value());
    EXPECT_EQ(resp->list_services_response().service_size(), 5);
  }
  std::string bytes;
  ASSERT_TRUE(RawUnary(s.channel(), kCheck, HealthRequest(""), &bytes).ok());
  grpc::health::v1::HealthCheckResponse resp;
  ASSERT_TRUE(resp.ParseFromString(bytes));
  EXPECT_EQ(resp.status(), Health::SERVING);
}

// ---- Health --------------------------------------------------------------------

// Junk on Watch (it was INTERNAL) and on Check: INVALID_ARGUMENT naming the
// type.
TEST(HealthReflectionTest, JunkOnHealthWatchAndCheckIsInvalidArgument) {
  InProcess s;
  ASSERT_OK(s.status);
  for (const std::string& junk : {kJunk, kBadUtf8}) {
    {
      RawCall call(s.channel(), kWatch);
      ASSERT_TRUE(call.started());
      call.Write(junk);
      call.WritesDone();
      EXPECT_FALSE(call.Read().has_value());
      const grpc::Status st = call.Finish();
      EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << st.error_message();
      EXPECT_THAT(st.error_message(),
                  HasSubstr("could not be parsed as a grpc.health.v1.HealthCheckRequest"));
    }
    const grpc::Status st = RawUnary(s.channel(), kCheck, junk);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << st.error_message();
    EXPECT_THAT(st.error_message(), HasSubstr("grpc.health.v1.HealthCheckRequest"));
  }
  // The server is fine afterwards.
  ASSERT_OK_AND_ASSIGN(std::string health, s.client->Health());
  EXPECT_EQ(health, "SERVING");
}

// Check of a service the server does not know: NOT_FOUND, as the protocol
// says; the known ones are SERVING.
TEST(HealthReflectionTest, CheckOfAnUnknownServiceIsNotFound) {
  InProcess s;
  ASSERT_OK(s.status);
  for (const char* known : {"", "zoom.v1.VectorSearch", "zoom.v1.Decoder"}) {
    ASSERT_OK_AND_ASSIGN(std::string health, s.client->Health(known));
    EXPECT_EQ(health, "SERVING") << known;
  }
  EXPECT_THAT(s.client->Health("zoom.v1.Nope").status(),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("zoom.v1.Nope")));
}

// Watch sends SERVING, then NOT_SERVING when the server shuts down, and
// ends OK: the watch does not hold the server's Shutdown until its grace
// runs out (60 s; it returns well before).
TEST(HealthReflectionTest, WatchSeesServingThenNotServingAtShutdown) {
  InProcess s;
  ASSERT_OK(s.status);
  RawCall whole(s.channel(), kWatch);
  RawCall unknown(s.channel(), kWatch);
  for (auto [call, service] : {std::pair{&whole, ""}, std::pair{&unknown, "zoom.v1.Nope"}}) {
    ASSERT_TRUE(call->started());
    ASSERT_TRUE(call->Write(HealthRequest(service)));
    ASSERT_TRUE(call->WritesDone());
  }
  auto first = whole.ReadAs<grpc::health::v1::HealthCheckResponse>();
  ASSERT_TRUE(first.has_value());
  EXPECT_EQ(first->status(), Health::SERVING);
  first = unknown.ReadAs<grpc::health::v1::HealthCheckResponse>();
  ASSERT_TRUE(first.has_value());
  EXPECT_EQ(first->status(), Health::SERVICE_UNKNOWN);

  absl::Duration shutdown_took;
  std::thread stopper([&] {
    const absl::Time start = absl::Now();
    s.server->Shutdown(absl::Seconds(60));
    shutdown_took = absl::Now() - start;
  });
  // A failed ASSERT below returns with the thread still running: joined
  // then too (a joinable std::thread destroyed aborts the process).
  absl::Cleanup join = [&] {
    if (stopper.joinable()) stopper.join();
  };
  for (RawCall* call : {&whole, &unknown}) {
    auto last = call->ReadAs<grpc::health::v1::HealthCheckResponse>();
    ASSERT_TRUE(last.has_value());
    EXPECT_EQ(last->status(), Health::NOT_SERVING);
    EXPECT_FALSE(call->Read().has_value());
    const grpc::Status st = call->Finish();
    EXPECT_TRUE(st.ok()) << st.error_code() << " " << st.error_message();
  }
  std::move(join).Invoke();
  EXPECT_LT(shutdown_took, absl::Seconds(30));
}

// The service alone on a gRPC server: Watch follows each change, a name
// that becomes known, and the end; Shutdown is for good.
TEST(HealthReflectionTest, HealthServiceFollowsChangesUntilShutdown) {
  server::HealthService health({"", "a"});
  int port = 0;
  grpc::ServerBuilder builder;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(&health);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  ASSERT_NE(server, nullptr);
  ASSERT_GT(port, 0);
  auto channel =
      grpc::CreateChannel(absl::StrCat("127.0.0.1:", port), grpc::InsecureChannelCredentials());
  auto check = [&](const std::string& service) {
    std::string bytes;
    grpc::Status st = RawUnary(channel, kCheck, HealthRequest(service), &bytes);
    grpc::health::v1::HealthCheckResponse resp;
    if (st.ok() && !resp.ParseFromString(bytes)) return -1;
    return st.ok() ? static_cast<int>(resp.status()) : -static_cast<int>(st.error_code()) - 100;
  };
  EXPECT_EQ(check(""), Health::NOT_SERVING);
  EXPECT_EQ(check("b"), -static_cast<int>(grpc::StatusCode::NOT_FOUND) - 100);

  auto watch = [&](const std::string& service) {
    auto call = std::make_unique<RawCall>(channel, kWatch);
    EXPECT_TRUE(call->Write(HealthRequest(service)));
    EXPECT_TRUE(call->WritesDone());
    return call;
  };
  auto next = [](RawCall& call) {
    auto resp = call.ReadAs<grpc::health::v1::HealthCheckResponse>();
    return resp.has_value() ? static_cast<int>(resp->status()) : -1;
  };
  std::unique_ptr<RawCall> a = watch("a");
  std::unique_ptr<RawCall> b = watch("b");
  EXPECT_EQ(next(*a), Health::NOT_SERVING);
  EXPECT_EQ(next(*b), Health::SERVICE_UNKNOWN);
  health.SetServingStatus("a", true);
  EXPECT_EQ(next(*a), Health::SERVING);
  health.SetServingStatus("a", false);
  EXPECT_EQ(next(*a), Health::NOT_SERVING);
  health.SetServingStatus("b", true);
  EXPECT_EQ(next(*b), Health::SERVING);
  EXPECT_EQ(check("b"), Health::SERVING);

  health.Shutdown();
  // `a` was NOT_SERVING already: not sent again, the watch just ends.
  EXPECT_EQ(next(*a), -1);
  EXPECT_TRUE(a->Finish().ok());
  EXPECT_EQ(next(*b), Health::NOT_SERVING);
  EXPECT_EQ(next(*b), -1);
  EXPECT_TRUE(b->Finish().ok());
  // For good: later changes are ignored; a new watch ends at once.
  health.SetServingStatus("a", true);
  EXPECT_EQ(check("a"), Health::NOT_SERVING);
  EXPECT_EQ(check("b"), Health::NOT_SERVING);
  std::unique_ptr<RawCall> late = watch("a");
  EXPECT_EQ(next(*late), Health::NOT_SERVING);
  EXPECT_EQ(next(*late), -1);
  EXPECT_TRUE(late->Finish().ok());

  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(60));
  server->Wait();
}

}  // namespace
}  // namespace zoom
