// The C++ client over several replicas (fake services on loopback, each with a replica id):
// targets and handles parsed, inline calls round robin, calls on a handle to the replica that
// made it, a handle of an unknown or stopped replica NOT_FOUND naming it.
#include "client/cpp/replica_router.h"

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_join.h"
#include "client/cpp/client.h"
#include "client/cpp/matrix.h"
#include "gtest/gtest.h"
#include "tests/client/fake_service.h"

namespace matserve::client {
namespace {

using kernels::DType;
using kernels::Layout;

TEST(ReplicaRouter, TheReplicaIdReadsBackFromAHandle) {
  EXPECT_EQ(handle_replica("pod-1:50051/0123"), "pod-1:50051");
  EXPECT_EQ(handle_replica("a.b_c-d/x"), "a.b_c-d");
  for (const std::string& bare :
       std::vector<std::string>{"0123abcd", "/x", "a b/x", "", std::string(49, 'r') + "/x"}) {
    EXPECT_FALSE(handle_replica(bare).has_value()) << bare;
  }
}

TEST(ReplicaRouter, TargetsNamingSeveralReplicas) {
  auto list = replica_addresses("a:1, b:2,c:3");
  ASSERT_TRUE(list.ok() && list->has_value());
  EXPECT_EQ(**list, (std::vector<std::string>{"a:1", "b:2", "c:3"}));
  auto one = replica_addresses("localhost:50051");
  ASSERT_TRUE(one.ok());
  EXPECT_FALSE(one->has_value());
  EXPECT_EQ(replica_addresses("a:1,,b:2").status().code(), absl::StatusCode::kInvalidArgument);
  std::vector<std::string> asked;
  auto dns = replica_addresses("dns:///svc.ns:50051", [&](const std::string& name) {
    asked.push_back(name);
    return absl::StatusOr<std::vector<std::string>>(
        std::vector<std::string>{"ipv4:10.0.0.1:50051", "ipv4:10.0.0.2:50051"});
  });
  ASSERT_TRUE(dns.ok() && dns->has_value());
  EXPECT_EQ((*dns)->size(), 2u);
  EXPECT_EQ(asked, std::vector<std::string>{"svc.ns:50051"});
  auto loopback = resolve_addresses("127.0.0.1:7");
  ASSERT_TRUE(loopback.ok()) << loopback.status();
  EXPECT_EQ(*loopback, std::vector<std::string>{"ipv4:127.0.0.1:7"});
}

TEST(ReplicaRouter, ARequestRoutesOnItsFirstHandleElseItsFirstRegion) {
  v1::MultiplyRequest m;
  m.set_b_handle("r2/x");
  m.mutable_a()->mutable_shm()->set_region("img");
  EXPECT_EQ(route_of(m).handle, "r2/x");
  m.clear_b_handle();
  EXPECT_EQ(route_of(m).handle, "");
  EXPECT_EQ(route_of(m).region, "img");
  v1::MultiplyBatchedRequest b;
  b.add_b_handles("r1/y");
  EXPECT_EQ(route_of(b).handle, "r1/y");
  v1::TransposeRequest t;
  t.mutable_output_shm()->set_region("out");
  EXPECT_EQ(route_of(t).region, "out");
}

class ThreeReplicas : public ::testing::Test {
 protected:
  void SetUp() override {
    std::vector<std::string> targets;
    for (int i = 0; i < 3; ++i) {
      servers_.push_back(std::make_unique<testing::FakeServer>());
      servers_.back()->service().set_replica_id("r" + std::to_string(i));
      targets.push_back(servers_.back()->target());
    }
    target_ = absl::StrJoin(targets, ",");
    ClientOptions options;
    options.deadline = std::chrono::seconds(20);
    absl::StatusOr<std::unique_ptr<Client>> c = Client::connect(target_, options);
    ASSERT_TRUE(c.ok()) << c.status();
    client_ = *std::move(c);
  }

  v1::Matrix matrix(int seed) {
    return *matrix_from_npy(random_matrix(4, 4, DType::kF32, Layout::kRowMajor, seed));
  }

  std::vector<std::unique_ptr<testing::FakeServer>> servers_;
  std::string target_;
  std::unique_ptr<Client> client_;
};

TEST_F(ThreeReplicas, UploadsGoRoundRobinAndCallsOnAHandleToItsReplica) {
  std::vector<std::string> handles;
  for (int i = 0; i < 6; ++i) {
    absl::StatusOr<v1::ResidentInfo> info = client_->upload(matrix(i));
    ASSERT_TRUE(info.ok()) << info.status();
    handles.push_back(info->handle());
  }
  for (auto& s : servers_) EXPECT_EQ(s->service().upload_calls(), 2);
  for (int round = 0; round < 2; ++round) {
    for (const std::string& h : handles) {
      const int replica = h[1] - '0';
      const int before = servers_[replica]->service().multiply_calls();
      v1::MultiplyRequest r;
      r.set_a_handle(h);
      r.set_b_handle(h);
      absl::StatusOr<v1::MultiplyReply> reply = client_->multiply(r);
      ASSERT_TRUE(reply.ok()) << h << ": " << reply.status();
      EXPECT_EQ(servers_[replica]->service().multiply_calls(), before + 1) << h;
      absl::StatusOr<v1::Matrix> back = client_->download(h);
      ASSERT_TRUE(back.ok()) << back.status();
    }
  }
  // Upload beside a handle goes to its replica; release of several goes to each holder.
  absl::StatusOr<v1::ResidentInfo> beside = client_->upload(matrix(9), 0, handles[1]);
  ASSERT_TRUE(beside.ok()) << beside.status();
  EXPECT_EQ(handle_replica(beside->handle()), handle_replica(handles[1]));
  absl::StatusOr<v1::ListResidentReply> all = client_->list_resident();
  ASSERT_TRUE(all.ok()) << all.status();
  EXPECT_EQ(all->matrices_size(), 7);
  handles.push_back(beside->handle());
  ASSERT_TRUE(client_->release(handles).ok());
  for (auto& s : servers_) EXPECT_EQ(s->service().resident_count(), 0u);
}

TEST_F(ThreeReplicas, AnUnknownReplicaIsNotFoundNamingIt) {
  v1::MultiplyRequest r;
  r.set_a_handle("r7/h1");
  r.set_b_handle("r7/h1");
  absl::StatusOr<v1::MultiplyReply> reply = client_->multiply(r);
  ASSERT_EQ(reply.status().code(), absl::StatusCode::kNotFound) << reply.status();
  EXPECT_NE(reply.status().message().find("replica 'r7' is not among the replicas of target"),
            std::string::npos)
      << reply.status();
  EXPECT_NE(reply.status().message().find("r0 ("), std::string::npos) << reply.status();
  EXPECT_EQ(client_->download("h1").status().code(), absl::StatusCode::kNotFound);
}

TEST_F(ThreeReplicas, AStoppedReplicaFailsOnlyItsHandlesWithNotFoundNamingIt) {
  std::vector<std::string> handles;
  for (int i = 0; i < 3; ++i) handles.push_back(client_->upload(matrix(i))->handle());
  ASSERT_TRUE(client_->download(handles[0]).ok());  // every replica's id known
  servers_[1].reset();
  for (const std::string& h : handles) {
    absl::StatusOr<v1::Matrix> got = client_->download(h);
    if (handle_replica(h) == "r1") {
      ASSERT_EQ(got.status().code(), absl::StatusCode::kNotFound) << got.status();
      EXPECT_NE(got.status().message().find("replica 'r1'"), std::string::npos) << got.status();
      EXPECT_NE(got.status().message().find("not reachable"), std::string::npos) << got.status();
    } else {
      EXPECT_TRUE(got.ok()) << h << ": " << got.status();
    }
  }
  // Calls on no handle skip it.
  for (int i = 0; i < 4; ++i) {
    absl::StatusOr<v1::ResidentInfo> info = client_->upload(matrix(10 + i));
    ASSERT_TRUE(info.ok()) << info.status();
    EXPECT_NE(handle_replica(info->handle()), "r1");
  }
}

}  // namespace
}  // namespace matserve::client
