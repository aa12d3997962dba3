// Device specs as upstream's --device: cpu, 0, cuda:0, and under data parallel a list with one entry per
// local rank.
#include <gtest/gtest.h>

#include "kestrel/core/device.h"
#include "kestrel/core/error.h"
#include "test_support.h"

namespace kestrel {
namespace {

TEST(Device, CpuAndBadSpecs) {
  EXPECT_TRUE(parse_device("cpu").is_cpu());
  EXPECT_TRUE(parse_device("CPU").is_cpu());
  EXPECT_THROW(parse_device("gpu7"), Error);
  // Devices LibTorch knows but kestrel does not run on: named at once, not by a later LibTorch error.
  for (const char* other : {"mps", "xpu:0", "meta"})
    EXPECT_NE(test::error_message([&] { parse_device(other); }).find(std::string("--device ") + other + ": kestrel runs on cpu or CUDA"),
              std::string::npos) << other;
  // A list outside data parallel: one process cannot use several devices.
  try {
    (void)parse_device("0,1");
    ADD_FAILURE() << "a device list was accepted by one process";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("one process each: kestrel train --nproc-per-node N --device 0,1"), std::string::npos) << e.what();
  }
}

TEST(Device, EachRankTakesItsEntryOfTheList) {
  EXPECT_EQ(device_of_rank("0,1", 0), "0");
  EXPECT_EQ(device_of_rank("2,3", 1), "3");
  EXPECT_EQ(device_of_rank(" 4, 5 ,6", 2), "6");
  EXPECT_EQ(device_of_rank("cpu,cpu", 1), "cpu");  // Gloo ranks may share the CPU
  // NCCL takes one GPU per rank: a device listed twice (in any spelling) is named.
  for (const char* spec : {"0,0", "1,cuda:1", "cuda,0"})
    EXPECT_NE(test::error_message([&] { device_of_rank(spec, 0); }).find("is listed twice"), std::string::npos) << spec;
  // One named GPU is a list of one (upstream: CUDA_VISIBLE_DEVICES=1, cuda:LOCAL_RANK among the visible):
  // local rank 0 takes it (one process per node: GPU 1 of each node), a second local rank has none.
  EXPECT_EQ(device_of_rank("1", 0), "1");
  EXPECT_EQ(device_of_rank("cuda:2", 0), "cuda:2");
  for (const char* spec : {"1", "cuda:0", "CUDA:3"})
    EXPECT_NE(test::error_message([&] { device_of_rank(spec, 1); }).find("names one GPU"), std::string::npos) << spec;
  // Nothing named: unchanged (the caller picks cuda:LOCAL_RANK, or the CPU).
  EXPECT_EQ(device_of_rank("", 1), "");
  EXPECT_EQ(device_of_rank("cuda", 3), "cuda");
  EXPECT_EQ(device_of_rank("cpu", 2), "cpu");
  EXPECT_THROW(device_of_rank("0,1", 2), Error);     // more ranks on this node than devices listed
  EXPECT_THROW(device_of_rank("0,,1", 0), Error);
}

TEST(Device, OneGpuIsNamedByIndexOrCudaIndex) {
  for (const char* spec : {"0", "7", "cuda:1", "CUDA:2"}) EXPECT_TRUE(names_one_gpu(spec)) << spec;
  for (const char* spec : {"", "cuda", "cpu", "CPU", "0,1"}) EXPECT_FALSE(names_one_gpu(spec)) << spec;
}

}  // namespace
}  // namespace kestrel
