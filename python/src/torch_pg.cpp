// eccl._torch: a torch.distributed (c10d) ProcessGroup on libeccl.
//
// torch.distributed.init_process_group(backend="eccl") after `import
// eccl.torch` (python/eccl/torch.py registers the backend). One translation
// unit on purpose: libtorch's headers cost most of its compile time.
//
// Forming the group. c10d's world is fixed, eccl's is elastic: rank 0 starts
// an in-process master (the C master API, as eccl.Master) on a free port
// and publishes "HOST:PORT" under the Store key "eccl/master" (the
// environment variable ECCL_MASTER_ADDR names an external master instead,
// and then nobody starts one). Every rank connects and runs the admission
// loop (peers_pending, then update_topology, as eccl.Comm.admit_pending)
// until the eccl world has world_size peers. eccl numbers its ranks by
// admission order, which is not c10d's; each rank therefore publishes its
// eccl rank under "eccl/rank/<c10d rank>" and reads every other one: the
// table c2e_ (c10d rank -> eccl rank) and its inverse e2c_ translate roots,
// send/recv peers and the block layouts (all-gather, all-to-all: through
// the v forms' displacements, no copy; reduce-scatter: a permuted copy of
// the input, only where the table is not the identity).
//
// Every op is issued with libeccl's _async call and returns a Work at once;
// one completion thread per group waits for the requests in issue order,
// runs the op's epilogue (copies out of a staging buffer) and completes the
// Work and its Future (DDP's reducer waits on getFuture()). The binding
// holds no protocol logic: retries, fault detection and buffer restoration
// are libeccl's. c10d's world cannot shrink, so the first failure of any op
// (ECCL_ERR_PEER_LOST, ...) breaks the group: that Work's wait() raises a
// RuntimeError naming the eccl error, and every later op raises at once.
// Recovery is the caller's: a new group on the survivors, or eccl's native
// elastic API (docs/python.md, "torch.distributed").
//
// CPU tensors only for now. CUDA tensors (libeccl takes device pointers and
// a stream: eccl_allreduce_ex_async's opts.stream) need torch built with
// CUDA to get at::cuda::getCurrentCUDAStream(); this build refuses them with
// a clear error rather than pretend.

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/utils/pybind.h>

#include <pybind11/chrono.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

extern "C" {
#include "eccl.h"
}

namespace py = pybind11;

namespace {

const char* result_name(eccl_result r) {
  switch (r) {
    case ECCL_OK: return "ECCL_OK";
    case ECCL_ERR_INVALID_ARG: return "ECCL_ERR_INVALID_ARG";
    case ECCL_ERR_NO_MEMORY: return "ECCL_ERR_NO_MEMORY";
    case ECCL_ERR_SYSTEM: return "ECCL_ERR_SYSTEM";
    case ECCL_ERR_CONNECT: return "ECCL_ERR_CONNECT";
    case ECCL_ERR_TIMEOUT: return "ECCL_ERR_TIMEOUT";
    case ECCL_ERR_PEER_LOST: return "ECCL_ERR_PEER_LOST";
    case ECCL_ERR_TOO_FEW_PEERS: return "ECCL_ERR_TOO_FEW_PEERS";
    case ECCL_ERR_PROTOCOL: return "ECCL_ERR_PROTOCOL";
    case ECCL_ERR_KICKED: return "ECCL_ERR_KICKED";
    case ECCL_ERR_MASTER_LOST: return "ECCL_ERR_MASTER_LOST";
    case ECCL_ERR_BUSY: return "ECCL_ERR_BUSY";
    case ECCL_ERR_NOT_CONNECTED: return "ECCL_ERR_NOT_CONNECTED";
    case ECCL_ERR_AGAIN: return "ECCL_ERR_AGAIN";
    case ECCL_ERR_CLOSED: return "ECCL_ERR_CLOSED";
    case ECCL_ERR_UNSUPPORTED: return "ECCL_ERR_UNSUPPORTED";
    case ECCL_ERR_DEVICE: return "ECCL_ERR_DEVICE";
    case ECCL_ERR_AUTH: return "ECCL_ERR_AUTH";
  }
  return "ECCL_ERR_?";
}

std::string describe(eccl_result r, const std::string& what) {
  return "eccl: " + what + " failed: " + result_name(r) + " (" + eccl_strerror(r) + ")";
}

[[noreturn]] void fail(eccl_result r, const std::string& what) {
  throw std::runtime_error(describe(r, what));
}

void check(eccl_result r, const std::string& what) {
  if (r != ECCL_OK) fail(r, what);
}

eccl_dtype to_eccl(const at::Tensor& t, bool reducing) {
  switch (t.scalar_type()) {
    case at::kFloat: return ECCL_F32;
    case at::kDouble: return ECCL_F64;
    case at::kHalf: return ECCL_F16;
    case at::kBFloat16: return ECCL_BF16;
    case at::kChar: return ECCL_I8;
    case at::kByte: return ECCL_U8;
    case at::kShort: return ECCL_I16;
    case at::kInt: return ECCL_I32;
    case at::kLong: return ECCL_I64;
    case at::kBool:
      // Moved as bytes; a reduction of bools has no eccl op.
      if (!reducing) return ECCL_U8;
      break;
    default:
      break;
  }
  TORCH_CHECK(false, "eccl backend: dtype ", t.scalar_type(),
              reducing ? " cannot be reduced" : " is not supported");
}

eccl_op to_eccl(const c10d::ReduceOp& op) {
  switch (op.op_) {
    case c10d::ReduceOp::SUM: return ECCL_SUM;
    case c10d::ReduceOp::AVG: return ECCL_AVG;
    case c10d::ReduceOp::PRODUCT: return ECCL_PROD;
    case c10d::ReduceOp::MIN: return ECCL_MIN;
    case c10d::ReduceOp::MAX: return ECCL_MAX;
    default:
      break;
  }
  TORCH_CHECK(false, "eccl backend: reduce op ", static_cast<int>(op.op_),
              " is not supported (SUM, AVG, PRODUCT, MIN, MAX are)");
}

void check_tensor(const at::Tensor& t, const char* what) {
  TORCH_CHECK(t.defined(), "eccl backend: ", what, ": undefined tensor");
  TORCH_CHECK(!t.is_cuda(), "eccl backend: ", what,
              ": CUDA tensors are not supported by this build (CPU tensors only)");
  TORCH_CHECK(t.device().is_cpu(), "eccl backend: ", what, ": only CPU tensors are supported, got ",
              t.device());
  TORCH_CHECK(t.is_contiguous(), "eccl backend: ", what, ": tensor must be contiguous");
  TORCH_CHECK(!t.is_sparse(), "eccl backend: ", what, ": sparse tensors are not supported");
}

const at::Tensor& single(std::vector<at::Tensor>& ts, const char* what) {
  TORCH_CHECK(ts.size() == 1, "eccl backend: ", what, " takes exactly one tensor per process, got ",
              ts.size());
  check_tensor(ts[0], what);
  return ts[0];
}

// ---- Work ---------------------------------------------------------------------

class EcclWork : public c10d::Work {
 public:
  EcclWork(int rank, c10d::OpType type, std::vector<at::Tensor> outputs)
      : c10d::Work(rank, type), outputs_(std::move(outputs)),
        future_(c10::make_intrusive<at::ivalue::Future>(
            c10::ListType::create(c10::TensorType::get()))) {}

  std::vector<at::Tensor> result() override { return outputs_; }
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override { return future_; }

  // Called once, by the completion thread (or at issue, for an op that ends
  // there). The Work is finished before the Future: a Future callback that
  // inspects the Work sees it complete.
  void complete(std::exception_ptr error) {
    finish(error);
    if (error)
      future_->setError(error);
    else
      future_->markCompleted(c10::IValue(outputs_));
  }

 private:
  std::vector<at::Tensor> outputs_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
};

// ---- the process group ----------------------------------------------------------

class ProcessGroupEccl : public c10d::ProcessGroup {
 public:
  ProcessGroupEccl(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                   std::chrono::milliseconds timeout)
      : c10d::ProcessGroup(rank, size) {
    TORCH_CHECK(size >= 1, "eccl backend: world_size must be >= 1");
    const int64_t tmo = timeout.count();
    op_timeout_ms_ = tmo <= 0 ? 60000u : static_cast<uint32_t>(std::min<int64_t>(tmo, UINT32_MAX));
    store_ = store;
    try {
      form(store);
    } catch (...) {
      teardown();
      throw;
    }
    completer_ = std::thread([this] { complete_loop(); });
  }

  ~ProcessGroupEccl() override {
    {
      std::lock_guard<std::mutex> lk(qmu_);
      stop_ = true;
    }
    qcv_.notify_all();
    if (completer_.joinable()) completer_.join();
    leave_together();
    teardown();
  }

  const std::string getBackendName() const override { return "eccl"; }

  std::string master_address() const { return master_addr_; }
  std::vector<int64_t> eccl_ranks() const { return std::vector<int64_t>(c2e_.begin(), c2e_.end()); }

  // ---- collectives ----

  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                           const c10d::AllreduceOptions& opts) override {
    const at::Tensor& t = single(tensors, "allreduce");
    const eccl_dtype dt = to_eccl(t, true);
    const eccl_op op = to_eccl(opts.reduceOp);
    if (size_ == 1) return solo(c10d::OpType::ALLREDUCE, {t}, nullptr);
    return issue(c10d::OpType::ALLREDUCE, {t}, "all_reduce", [&](uint64_t tag, eccl_request** req) {
      return eccl_allreduce_async(comm_, t.data_ptr(), t.data_ptr(), t.numel(), dt, op, tag, req);
    });
  }

  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(
      std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) override {
    TORCH_CHECK(!tensors.empty(), "eccl backend: allreduce_coalesced of no tensors");
    for (auto& t : tensors) {
      check_tensor(t, "allreduce_coalesced");
      TORCH_CHECK(t.scalar_type() == tensors[0].scalar_type(),
                  "eccl backend: allreduce_coalesced tensors must share a dtype");
    }
    const eccl_dtype dt = to_eccl(tensors[0], true);
    const eccl_op op = to_eccl(opts.reduceOp);
    std::vector<at::Tensor> flats;
    for (auto& t : tensors) flats.push_back(t.reshape({-1}));
    at::Tensor flat = at::cat(flats);
    std::vector<at::Tensor> outs = tensors;
    if (size_ == 1) return solo(c10d::OpType::ALLREDUCE_COALESCED, tensors, nullptr);
    return issue(c10d::OpType::ALLREDUCE_COALESCED, outs, "allreduce_coalesced",
                 [&](uint64_t tag, eccl_request** req) {
                   return eccl_allreduce_async(comm_, flat.data_ptr(), flat.data_ptr(), flat.numel(),
                                               dt, op, tag, req);
                 },
                 [flat, outs]() mutable {
                   int64_t off = 0;
                   for (auto& o : outs) {
                     o.view({-1}).copy_(flat.narrow(0, off, o.numel()));
                     off += o.numel();
                   }
                 });
  }

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                           const c10d::BroadcastOptions& opts) override {
    const at::Tensor& t = single(tensors, "broadcast");
    const eccl_dtype dt = to_eccl(t, false);
    const uint32_t root = eccl_rank(opts.rootRank, "broadcast root");
    if (size_ == 1) return solo(c10d::OpType::BROADCAST, {t}, nullptr);
    return issue(c10d::OpType::BROADCAST, {t}, "broadcast", [&](uint64_t tag, eccl_request** req) {
      return eccl_broadcast_async(comm_, t.data_ptr(), t.data_ptr(), t.numel(), dt, root, tag, req);
    });
  }

  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& tensors,
                                        const c10d::ReduceOptions& opts) override {
    const at::Tensor& t = single(tensors, "reduce");
    const eccl_dtype dt = to_eccl(t, true);
    const eccl_op op = to_eccl(opts.reduceOp);
    const uint32_t root = eccl_rank(opts.rootRank, "reduce root");
    if (size_ == 1) return solo(c10d::OpType::REDUCE, {t}, nullptr);
    return issue(c10d::OpType::REDUCE, {t}, "reduce", [&](uint64_t tag, eccl_request** req) {
      return eccl_reduce_async(comm_, t.data_ptr(), t.data_ptr(), t.numel(), dt, op, root, tag, req);
    });
  }

  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                                                 const c10d::AllgatherOptions&) override {
    check_tensor(output, "_allgather_base output");
    check_tensor(input, "_allgather_base input");
    TORCH_CHECK(output.scalar_type() == input.scalar_type(),
                "eccl backend: _allgather_base: output and input dtypes differ");
    TORCH_CHECK(output.numel() == input.numel() * size_,
                "eccl backend: _allgather_base: output must hold world_size * input.numel() elements");
    const eccl_dtype dt = to_eccl(input, false);
    if (size_ == 1) return solo(c10d::OpType::_ALLGATHER_BASE, {output}, [&] { output.view({-1}).copy_(input.view({-1})); });
    return issue(c10d::OpType::_ALLGATHER_BASE, {output}, "all_gather_into_tensor",
                 [&](uint64_t tag, eccl_request** req) {
                   return allgather_into(input.data_ptr(), output.data_ptr(), input.numel(), dt, tag, req);
                 },
                 [input]() {});  // keeps the input alive until the op ended
  }

  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                           std::vector<at::Tensor>& inputs,
                                           const c10d::AllgatherOptions&) override {
    const at::Tensor& in = single(inputs, "allgather input");
    TORCH_CHECK(outputs.size() == 1 && static_cast<int>(outputs[0].size()) == size_,
                "eccl backend: allgather needs one list of world_size output tensors");
    for (auto& o : outputs[0]) {
      TORCH_CHECK(o.defined() && o.device().is_cpu(), "eccl backend: allgather: CPU outputs only");
      TORCH_CHECK(o.numel() == in.numel() && o.scalar_type() == in.scalar_type(),
                  "eccl backend: allgather: every output must match the input's size and dtype");
    }
    const eccl_dtype dt = to_eccl(in, false);
    at::Tensor flat = at::empty({in.numel() * size_}, in.options());
    std::vector<at::Tensor> outs = outputs[0];
    const int64_t n = in.numel();
    if (size_ == 1) return solo(c10d::OpType::ALLGATHER, outs, [&] { outs[0].copy_(in.view(outs[0].sizes())); });
    return issue(c10d::OpType::ALLGATHER, outs, "all_gather",
                 [&](uint64_t tag, eccl_request** req) {
                   return allgather_into(in.data_ptr(), flat.data_ptr(), n, dt, tag, req);
                 },
                 [in, flat, outs, n]() mutable {
                   for (size_t r = 0; r < outs.size(); r++)
                     outs[r].copy_(flat.narrow(0, static_cast<int64_t>(r) * n, n).view(outs[r].sizes()));
                 });
  }

  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                                      const c10d::ReduceScatterOptions& opts) override {
    check_tensor(output, "_reduce_scatter_base output");
    check_tensor(input, "_reduce_scatter_base input");
    TORCH_CHECK(output.scalar_type() == input.scalar_type(),
                "eccl backend: _reduce_scatter_base: output and input dtypes differ");
    TORCH_CHECK(input.numel() == output.numel() * size_,
                "eccl backend: _reduce_scatter_base: input must hold world_size * output.numel() elements");
    const eccl_dtype dt = to_eccl(input, true);
    const eccl_op op = to_eccl(opts.reduceOp);
    // eccl's block r is eccl rank r's; c10d's block c is c10d rank c's.
    at::Tensor send = identity_ ? input : permute_blocks(input.view({-1}), output.numel());
    if (size_ == 1) return solo(c10d::OpType::_REDUCE_SCATTER_BASE, {output}, [&] { output.view({-1}).copy_(input.view({-1})); });
    return issue(c10d::OpType::_REDUCE_SCATTER_BASE, {output}, "reduce_scatter_tensor",
                 [&](uint64_t tag, eccl_request** req) {
                   return eccl_reduce_scatter_async(comm_, send.data_ptr(), output.data_ptr(),
                                                    output.numel(), dt, op, tag, req);
                 },
                 [send]() {});
  }

  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor>& outputs,
                                                std::vector<std::vector<at::Tensor>>& inputs,
                                                const c10d::ReduceScatterOptions& opts) override {
    const at::Tensor& out = single(outputs, "reduce_scatter output");
    TORCH_CHECK(inputs.size() == 1 && static_cast<int>(inputs[0].size()) == size_,
                "eccl backend: reduce_scatter needs one list of world_size input tensors");
    for (auto& i : inputs[0]) {
      TORCH_CHECK(i.defined() && i.device().is_cpu(), "eccl backend: reduce_scatter: CPU inputs only");
      TORCH_CHECK(i.numel() == out.numel() && i.scalar_type() == out.scalar_type(),
                  "eccl backend: reduce_scatter: every input must match the output's size and dtype");
    }
    const eccl_dtype dt = to_eccl(out, true);
    const eccl_op op = to_eccl(opts.reduceOp);
    // Staged in eccl's block order.
    std::vector<at::Tensor> blocks;
    for (int e = 0; e < size_; e++) blocks.push_back(inputs[0][e2c_[e]].reshape({-1}));
    at::Tensor send = at::cat(blocks);
    if (size_ == 1) return solo(c10d::OpType::REDUCE_SCATTER, {out}, [&] { out.copy_(inputs[0][0].view(out.sizes())); });
    return issue(c10d::OpType::REDUCE_SCATTER, {out}, "reduce_scatter",
                 [&](uint64_t tag, eccl_request** req) {
                   return eccl_reduce_scatter_async(comm_, send.data_ptr(), out.data_ptr(), out.numel(),
                                                    dt, op, tag, req);
                 },
                 [send]() {});
  }

  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& output, at::Tensor& input,
                                               std::vector<int64_t>& outSplits,
                                               std::vector<int64_t>& inSplits,
                                               const c10d::AllToAllOptions&) override {
    check_tensor(output, "alltoall_base output");
    check_tensor(input, "alltoall_base input");
    TORCH_CHECK(output.scalar_type() == input.scalar_type(),
                "eccl backend: alltoall_base: output and input dtypes differ");
    const eccl_dtype dt = to_eccl(input, false);
    const int64_t in_row = input.dim() ? input.numel() / std::max<int64_t>(1, input.size(0)) : 1;
    const int64_t out_row = output.dim() ? output.numel() / std::max<int64_t>(1, output.size(0)) : 1;
    std::vector<size_t> sc, sd, rc, rd;
    layout(inSplits, input, in_row, "input", sc, sd);
    layout(outSplits, output, out_row, "output", rc, rd);
    if (size_ == 1) return solo(c10d::OpType::ALLTOALL_BASE, {output}, [&] { output.view({-1}).copy_(input.view({-1})); });
    return issue(c10d::OpType::ALLTOALL_BASE, {output}, "all_to_all_single",
                 [&](uint64_t tag, eccl_request** req) {
                   return eccl_alltoallv_async(comm_, input.data_ptr(), sc.data(), sd.data(),
                                               output.data_ptr(), rc.data(), rd.data(), dt, tag, req);
                 },
                 [input]() {});  // keeps the input alive until the op ended
  }

  c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
                                          const c10d::AllToAllOptions&) override {
    TORCH_CHECK(static_cast<int>(outputs.size()) == size_ && static_cast<int>(inputs.size()) == size_,
                "eccl backend: alltoall needs world_size input and output tensors");
    const at::ScalarType st = inputs[0].scalar_type();
    for (auto& t : inputs) TORCH_CHECK(t.device().is_cpu() && t.scalar_type() == st, "eccl backend: alltoall: CPU tensors of one dtype");
    for (auto& t : outputs) TORCH_CHECK(t.device().is_cpu() && t.scalar_type() == st, "eccl backend: alltoall: CPU tensors of one dtype");
    const eccl_dtype dt = to_eccl(inputs[0], false);
    std::vector<at::Tensor> ins;
    for (auto& t : inputs) ins.push_back(t.reshape({-1}));
    at::Tensor send = at::cat(ins);
    int64_t total = 0;
    for (auto& t : outputs) total += t.numel();
    at::Tensor recv = at::empty({total}, inputs[0].options());
    std::vector<size_t> sc(size_), sd(size_), rc(size_), rd(size_);
    std::vector<int64_t> soff(size_ + 1, 0), roff(size_ + 1, 0);
    for (int c = 0; c < size_; c++) {
      soff[c + 1] = soff[c] + inputs[c].numel();
      roff[c + 1] = roff[c] + outputs[c].numel();
    }
    for (int e = 0; e < size_; e++) {
      const int c = e2c_[e];
      sc[e] = inputs[c].numel(); sd[e] = soff[c];
      rc[e] = outputs[c].numel(); rd[e] = roff[c];
    }
    std::vector<at::Tensor> outs = outputs;
    if (size_ == 1) return solo(c10d::OpType::ALLTOALL, outs, [&] { outs[0].copy_(inputs[0].view(outs[0].sizes())); });
    return issue(c10d::OpType::ALLTOALL, outs, "all_to_all",
                 [&](uint64_t tag, eccl_request** req) {
                   return eccl_alltoallv_async(comm_, send.data_ptr(), sc.data(), sd.data(), recv.data_ptr(),
                                               rc.data(), rd.data(), dt, tag, req);
                 },
                 [send, recv, outs, roff]() mutable {
                   for (size_t c = 0; c < outs.size(); c++)
                     outs[c].copy_(recv.narrow(0, roff[c], outs[c].numel()).view(outs[c].sizes()));
                 });
  }

  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dst, int tag) override {
    const at::Tensor& t = single(tensors, "send");
    const eccl_dtype dt = to_eccl(t, false);
    const uint32_t peer = eccl_rank(dst, "send destination");
    const uint64_t etag = p2p_tag(dst, tag, true);
    return issue(c10d::OpType::SEND, {t}, "send", [&](uint64_t, eccl_request** req) {
      return eccl_send_async(comm_, t.data_ptr(), t.numel(), dt, peer, etag, req);
    }, nullptr, false);
  }

  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int src, int tag) override {
    const at::Tensor& t = single(tensors, "recv");
    const eccl_dtype dt = to_eccl(t, false);
    const uint32_t peer = eccl_rank(src, "recv source");
    const uint64_t etag = p2p_tag(src, tag, false);
    return issue(c10d::OpType::RECV, {t}, "recv", [&](uint64_t, eccl_request** req) {
      return eccl_recv_async(comm_, t.data_ptr(), t.numel(), dt, peer, etag, req);
    }, nullptr, false);
  }

  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions&) override {
    if (size_ == 1) return solo(c10d::OpType::BARRIER, {}, nullptr);
    return issue(c10d::OpType::BARRIER, {}, "barrier", [&](uint64_t tag, eccl_request** req) {
      return eccl_barrier_async(comm_, tag, req);
    });
  }

 private:
  using Starter = std::function<eccl_result(uint64_t, eccl_request**)>;
  using Epilogue = std::function<void()>;

  struct Pending {
    c10::intrusive_ptr<EcclWork> work;
    eccl_request* req;
    Epilogue epilogue;
    std::string what;
    bool collective;
  };

  // ---- forming the group ----

  void form(const c10::intrusive_ptr<c10d::Store>& store) {
    const char* env = std::getenv("ECCL_MASTER_ADDR");
    if (env && *env) {
      master_addr_ = env;
    } else if (rank_ == 0) {
      const char* listen = std::getenv("ECCL_TORCH_MASTER_LISTEN");
      check(eccl_master_create(listen && *listen ? listen : "127.0.0.1:0", &master_), "master create");
      char buf[256];
      check(eccl_master_address(master_, buf, sizeof buf), "master address");
      check(eccl_master_run(master_), "master run");
      master_addr_ = buf;
      store->set("eccl/master", std::vector<uint8_t>(master_addr_.begin(), master_addr_.end()));
    } else {
      const std::vector<uint8_t> v = store->get("eccl/master");
      master_addr_.assign(v.begin(), v.end());
    }

    eccl_comm_params params;
    eccl_comm_params_init(&params);
    params.master_addr = master_addr_.c_str(); /* p2p_host: libeccl reads ECCL_P2P_HOST */
    params.op_timeout_ms = op_timeout_ms_;
    params.connect_timeout_ms = std::min<uint32_t>(op_timeout_ms_, 60000u);
    check(eccl_comm_create(&params, &comm_), "comm create");
    check(eccl_comm_connect(comm_), "connect to master " + master_addr_);

    // The admission loop, until every c10d rank is in.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(op_timeout_ms_);
    for (;;) {
      int64_t world = 0;
      check(eccl_comm_get_attr(comm_, ECCL_ATTR_WORLD_SIZE, &world), "world size");
      if (world >= size_) {
        TORCH_CHECK(world == size_, "eccl backend: the eccl world has ", world,
                    " peers, more than world_size ", size_, " (another run on master ", master_addr_, "?)");
        break;
      }
      TORCH_CHECK(std::chrono::steady_clock::now() < deadline, "eccl backend: admission stuck at ", world,
                  " of ", size_, " peers on master ", master_addr_);
      uint32_t pending = 0;
      check(eccl_comm_peers_pending(comm_, &pending), "peers_pending");
      if (pending)
        check(eccl_comm_update_topology(comm_), "update_topology");
      else
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }

    // c10d rank <-> eccl rank, exchanged once through the Store.
    int64_t erank = -1;
    check(eccl_comm_get_attr(comm_, ECCL_ATTR_RANK, &erank), "rank");
    const std::string mine = std::to_string(erank);
    store->set("eccl/rank/" + std::to_string(rank_), std::vector<uint8_t>(mine.begin(), mine.end()));
    c2e_.assign(size_, 0);
    e2c_.assign(size_, -1);
    identity_ = true;
    for (int c = 0; c < size_; c++) {
      const std::vector<uint8_t> v = store->get("eccl/rank/" + std::to_string(c));
      const int e = std::stoi(std::string(v.begin(), v.end()));
      TORCH_CHECK(e >= 0 && e < size_ && e2c_[e] == -1, "eccl backend: inconsistent rank table");
      c2e_[c] = static_cast<uint32_t>(e);
      e2c_[e] = c;
      identity_ = identity_ && e == c;
    }
  }

  // An orderly end where every rank destroys its group: all ranks say so in
  // the Store, then leave together (eccl_comm_leave: nobody sees the others
  // go as a loss), and rank 0 stops the master only once every rank has
  // closed its communicator (else they would log the master as lost). A
  // rank that never comes (it exited without destroying the group, or the
  // group is broken) costs at most kLeaveWaitMs, and then the
  // communicators are simply destroyed.
  void leave_together() noexcept {
    static constexpr std::chrono::milliseconds kLeaveWaitMs{10000};
    if (!comm_ || !store_) return;
    {
      std::lock_guard<std::mutex> lk(tag_mu_issue_);
      if (!broken_.empty()) return;
    }
    try {
      std::vector<std::string> leaving, closed;
      for (int c = 0; c < size_; c++) {
        leaving.push_back("eccl/leaving/" + std::to_string(c));
        closed.push_back("eccl/closed/" + std::to_string(c));
      }
      const std::vector<uint8_t> one{'1'};
      store_->set(leaving[rank_], one);
      store_->wait(leaving, kLeaveWaitMs);
      eccl_comm_leave(comm_);
      eccl_comm_destroy(comm_);
      comm_ = nullptr;
      store_->set(closed[rank_], one);
      if (master_) store_->wait(closed, kLeaveWaitMs);
    } catch (...) {
      // a rank that did not come, or a Store already gone: just close
    }
  }

  void teardown() {
    if (comm_) eccl_comm_destroy(comm_);
    comm_ = nullptr;
    if (master_) {
      eccl_master_stop(master_);
      eccl_master_destroy(master_);
    }
    master_ = nullptr;
  }

  // ---- helpers ----

  uint32_t eccl_rank(int64_t c10d_rank, const char* what) const {
    TORCH_CHECK(c10d_rank >= 0 && c10d_rank < size_, "eccl backend: ", what, " ", c10d_rank,
                " is not a rank of this group of ", size_);
    return c2e_[c10d_rank];
  }

  eccl_result allgather_into(const void* in, void* out, int64_t n, eccl_dtype dt, uint64_t tag,
                             eccl_request** req) {
    if (identity_) return eccl_allgather_async(comm_, in, out, n, dt, tag, req);
    std::vector<size_t> counts(size_, static_cast<size_t>(n)), displs(size_);
    for (int e = 0; e < size_; e++) displs[e] = static_cast<size_t>(e2c_[e]) * n;
    return eccl_allgatherv_async(comm_, in, out, counts.data(), displs.data(), dt, tag, req);
  }

  at::Tensor permute_blocks(const at::Tensor& flat, int64_t block) const {
    std::vector<at::Tensor> blocks;
    for (int e = 0; e < size_; e++) blocks.push_back(flat.narrow(0, e2c_[e] * block, block));
    return at::cat(blocks);
  }

  // Element counts and displacements in eccl's block order from c10d's
  // split sizes (rows); empty splits: equal blocks.
  void layout(const std::vector<int64_t>& splits, const at::Tensor& t, int64_t row, const char* what,
              std::vector<size_t>& counts, std::vector<size_t>& displs) const {
    std::vector<int64_t> cnt(size_), off(size_ + 1, 0);
    if (splits.empty()) {
      TORCH_CHECK(t.numel() % size_ == 0, "eccl backend: all_to_all_single ", what,
                  " does not split into world_size equal blocks");
      for (int c = 0; c < size_; c++) cnt[c] = t.numel() / size_;
    } else {
      TORCH_CHECK(static_cast<int>(splits.size()) == size_, "eccl backend: all_to_all_single ", what,
                  " split sizes need world_size entries");
      for (int c = 0; c < size_; c++) cnt[c] = splits[c] * row;
    }
    for (int c = 0; c < size_; c++) off[c + 1] = off[c] + cnt[c];
    TORCH_CHECK(off[size_] == t.numel(), "eccl backend: all_to_all_single ", what,
                " split sizes do not add up to the tensor");
    counts.assign(size_, 0);
    displs.assign(size_, 0);
    for (int e = 0; e < size_; e++) {
      counts[e] = static_cast<size_t>(cnt[e2c_[e]]);
      displs[e] = static_cast<size_t>(off[e2c_[e]]);
    }
  }

  // Tags below 2^62 number the collectives in issue order (the same on
  // every rank, as c10d requires); bit 62 marks send/recv, numbered per
  // (peer, c10d tag, direction) so that the n-th send to a peer meets that
  // peer's n-th receive from us with the same tag.
  uint64_t p2p_tag(int peer, int tag, bool sending) {
    std::lock_guard<std::mutex> lk(tag_mu_);
    const uint64_t seq = p2p_seq_[std::make_tuple(peer, tag, sending)]++;
    return (uint64_t{1} << 62) | (static_cast<uint64_t>(static_cast<uint32_t>(tag) & 0xffffu) << 40) |
           (seq & ((uint64_t{1} << 40) - 1));
  }

  // world_size 1: libeccl's collectives need two peers (TOO_FEW_PEERS), and
  // c10d's result with one rank is the input (copied where the output is
  // another tensor): done here, the Work complete at once.
  c10::intrusive_ptr<c10d::Work> solo(c10d::OpType type, std::vector<at::Tensor> outputs,
                                      const std::function<void()>& copy) {
    auto work = c10::make_intrusive<EcclWork>(rank_, type, std::move(outputs));
    if (copy) copy();
    work->complete(nullptr);
    return work;
  }

  c10::intrusive_ptr<c10d::Work> issue(c10d::OpType type, std::vector<at::Tensor> outputs,
                                       const char* what, const Starter& start,
                                       Epilogue epilogue = nullptr, bool collective = true) {
    auto work = c10::make_intrusive<EcclWork>(rank_, type, std::move(outputs));
    eccl_request* req = nullptr;
    {
      // One lock around numbering and issuing: two threads issuing at
      // once still issue in tag order.
      std::lock_guard<std::mutex> lk(tag_mu_issue_);
      if (!broken_.empty())
        throw std::runtime_error("eccl: " + std::string(what) + ": the process group is broken by an earlier " +
                                 broken_ + "; build a new group on the survivors");
      const uint64_t tag = collective ? next_tag_++ : 0;
      const eccl_result r = start(tag, &req);
      if (r != ECCL_OK) {
        broken_ = result_name(r);
        if (r == ECCL_ERR_TOO_FEW_PEERS)
          throw std::runtime_error(describe(r, what) + ": a peer of this group of " + std::to_string(size_) +
                                   " was lost");
        fail(r, what);
      }
    }
    {
      std::lock_guard<std::mutex> lk(qmu_);
      queue_.push_back(Pending{work, req, std::move(epilogue), what, collective});
    }
    qcv_.notify_one();
    return work;
  }

  void complete_loop() {
    for (;;) {
      Pending p;
      {
        std::unique_lock<std::mutex> lk(qmu_);
        qcv_.wait(lk, [this] { return stop_ || !queue_.empty(); });
        if (queue_.empty()) return;  // stop_ and nothing left to wait for
        p = std::move(queue_.front());
        queue_.pop_front();
      }
      eccl_reduce_info info{};
      const eccl_result r = eccl_wait(p.req, &info);
      std::exception_ptr error;
      if (r != ECCL_OK) {
        {
          std::lock_guard<std::mutex> lk(tag_mu_issue_);
          if (broken_.empty()) broken_ = result_name(r);
        }
        error = std::make_exception_ptr(std::runtime_error(describe(r, p.what)));
      } else if (p.collective && info.world_size != static_cast<uint32_t>(size_)) {
        // A peer was lost between two calls and libeccl ran this one on the
        // survivors: right for an elastic caller, not for c10d, whose
        // layouts and sums are those of world_size ranks.
        {
          std::lock_guard<std::mutex> lk(tag_mu_issue_);
          if (broken_.empty()) broken_ = "ECCL_ERR_PEER_LOST";
        }
        error = std::make_exception_ptr(std::runtime_error(
            "eccl: " + p.what + " ran on " + std::to_string(info.world_size) + " of " + std::to_string(size_) +
            " peers: a peer was lost (ECCL_ERR_PEER_LOST); the output is not this group's result"));
      } else if (p.epilogue) {
        try {
          p.epilogue();
        } catch (...) {
          error = std::current_exception();
        }
      }
      p.work->complete(error);
    }
  }

  c10::intrusive_ptr<c10d::Store> store_;
  eccl_master* master_ = nullptr;
  eccl_comm* comm_ = nullptr;
  std::string master_addr_;
  uint32_t op_timeout_ms_ = 60000;
  std::vector<uint32_t> c2e_;
  std::vector<int> e2c_;
  bool identity_ = true;

  std::mutex tag_mu_;        // p2p_seq_
  std::map<std::tuple<int, int, bool>, uint64_t> p2p_seq_;
  std::mutex tag_mu_issue_;  // next_tag_, broken_, issue order
  uint64_t next_tag_ = 1;
  std::string broken_;

  std::mutex qmu_;
  std::condition_variable qcv_;
  std::deque<Pending> queue_;
  bool stop_ = false;
  std::thread completer_;
};

}  // namespace

PYBIND11_MODULE(_torch, m) {
  m.doc() = "eccl's torch.distributed ProcessGroup (import eccl.torch to register backend='eccl')";
  py::class_<ProcessGroupEccl, c10d::ProcessGroup, c10::intrusive_ptr<ProcessGroupEccl>>(m, "ProcessGroupEccl")
      .def(py::init([](const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                       std::chrono::milliseconds timeout) {
             return c10::make_intrusive<ProcessGroupEccl>(store, rank, size, timeout);
           }),
           py::arg("store"), py::arg("rank"), py::arg("size"), py::arg("timeout"),
           py::call_guard<py::gil_scoped_release>())
      .def_property_readonly("master_address", &ProcessGroupEccl::master_address)
      .def_property_readonly("eccl_ranks", &ProcessGroupEccl::eccl_ranks,
                             "eccl rank of each c10d rank (the table exchanged through the Store)");
}
