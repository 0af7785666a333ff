// gloo_colls: Gloo peer benchmark for every collective eccl is compared on,
// in nccl-tests' conventions: the Gloo twin of mpi_colls.c (same sizes,
// check, iteration counts and timing). Not part of the CMake build (CI has
// no Gloo): scripts/bench_colls_vs_peers.sh builds it with g++ -lgloo.
//
//   gloo_colls [-f F] [-n ITERS] [-w WARMUP] [-t BUDGET_S] [-c 0|1]
//              RANK SIZE STOREDIR COLL [MINBYTES [MAXBYTES]]
//
// One process per rank, all started with the same SIZE and an empty
// STOREDIR (gloo::rendezvous::FileStore), over the TCP transport on lo.
// COLL and its algorithm (Gloo 0.0~git20220518, Debian 12):
//   allreduce       AllreduceRingChunked, in place (as the all-reduce anchor)
//   allgather       gloo::allgather: ring, two segments in flight
//   reduce_scatter  ReduceScatterHalvingDoubling, in place (recursive
//                   halving; the result lands at the front of the buffer)
//   broadcast       gloo::broadcast: binomial tree from root 0
//   reduce          gloo::reduce: ring reduce-scatter, then gather to root 0
//   alltoall        gloo::alltoall: every pair at once
//   barrier         gloo::barrier: dissemination
// Sizes, rounding and busbw as in mpi_colls.c. One line per size on rank 0:
//   gloo coll=C n=N bytes=B time_us=T busbw_GBs=X
// A failed check goes to stderr and makes rank 0's exit status 1.
#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/allreduce_ring_chunked.h>
#include <gloo/alltoall.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/math.h>
#include <gloo/reduce.h>
#include <gloo/reduce_scatter.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/transport/tcp/device.h>

#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace {

enum Coll { ALLREDUCE, ALLGATHER, REDUCE_SCATTER, BROADCAST, REDUCE, ALLTOALL, BARRIER, NCOLLS };

const char* const kCollNames[NCOLLS] = {
    "allreduce", "allgather", "reduce_scatter", "broadcast", "reduce", "alltoall", "barrier",
};

constexpr size_t kEsize = sizeof(float);
constexpr size_t kPeriod = 13;  // the check pattern repeats with this period
constexpr int kRoot = 0;

struct Opts {
  Coll coll = NCOLLS;
  size_t minbytes = 8, maxbytes = size_t(256) << 20, factor = 2;
  long iters = 0;    // 0: scaled by size and budget
  long warmup = -1;  // -1: scaled by iters
  double budgetS = 0.5;
  int check = 1;
  int rank = 0, world = 0;
  const char* store = nullptr;
};

// Per-rank element counts of one size and the bytes its row reports.
struct Shape {
  size_t send = 0, recv = 0, block = 0, bytes = 0;
};

[[noreturn]] void usage(const std::string& why) {
  fprintf(stderr,
          "gloo_colls: %s\nusage: gloo_colls [-f F] [-n ITERS] [-w WARMUP] [-t BUDGET_S] "
          "[-c 0|1] RANK SIZE STOREDIR COLL [MINBYTES [MAXBYTES]]\n",
          why.c_str());
  exit(2);
}

size_t parseSize(const char* s) {
  char* end;
  errno = 0;
  unsigned long long v = strtoull(s, &end, 10);
  unsigned shift = 0;
  if (errno || end == s) usage(std::string("bad size '") + s + "'");
  switch (*end) {
    case 'K': case 'k': shift = 10; end++; break;
    case 'M': case 'm': shift = 20; end++; break;
    case 'G': case 'g': shift = 30; end++; break;
    default: break;
  }
  if (*end != '\0' || v > (ULLONG_MAX >> shift)) usage(std::string("bad size '") + s + "'");
  return size_t(v << shift);
}

long parseLong(const char* s, long lo) {
  char* end;
  errno = 0;
  long v = strtol(s, &end, 10);
  if (errno || end == s || *end != '\0' || v < lo) usage(std::string("bad number '") + s + "'");
  return v;
}

Opts parse(int argc, char** argv) {
  Opts o;
  int c;
  while ((c = getopt(argc, argv, "f:n:w:t:c:h")) != -1) {
    switch (c) {
      case 'f': o.factor = size_t(parseLong(optarg, 2)); break;
      case 'n': o.iters = parseLong(optarg, 1); break;
      case 'w': o.warmup = parseLong(optarg, 0); break;
      case 't': {
        char* end;
        o.budgetS = strtod(optarg, &end);
        if (end == optarg || *end != '\0' || !(o.budgetS >= 0))
          usage(std::string("bad budget '") + optarg + "'");
        break;
      }
      case 'c': o.check = int(parseLong(optarg, 0)); break;
      default: usage("bad option");
    }
  }
  if (argc - optind < 4) usage("need RANK SIZE STOREDIR COLL");
  o.rank = int(parseLong(argv[optind], 0));
  o.world = int(parseLong(argv[optind + 1], 1));
  o.store = argv[optind + 2];
  if (o.rank >= o.world) usage("RANK must be below SIZE");
  for (int i = 0; i < NCOLLS; i++)
    if (strcmp(argv[optind + 3], kCollNames[i]) == 0) o.coll = Coll(i);
  if (o.coll == NCOLLS) usage(std::string("unknown collective '") + argv[optind + 3] + "'");
  if (argc - optind > 4) o.minbytes = o.maxbytes = parseSize(argv[optind + 4]);
  if (argc - optind > 5) o.maxbytes = parseSize(argv[optind + 5]);
  if (argc - optind > 6) usage(std::string("unexpected argument '") + argv[optind + 6] + "'");
  if (o.minbytes < 1 || o.minbytes > o.maxbytes) usage("need 1 <= MINBYTES <= MAXBYTES");
  // Gloo's algorithm classes count elements and bytes in int.
  if (o.maxbytes > size_t(INT_MAX)) usage("MAXBYTES must stay below 2 GiB");
  return o;
}

Shape shapeOf(Coll c, size_t nominal, size_t n) {
  Shape s;
  switch (c) {
    case ALLREDUCE: case BROADCAST: case REDUCE:
      s.block = s.send = s.recv = nominal / kEsize ? nominal / kEsize : 1;
      s.bytes = s.send * kEsize;
      break;
    case ALLGATHER:
      s.block = nominal / kEsize / n ? nominal / kEsize / n : 1;
      s.send = s.block;
      s.recv = n * s.block;
      s.bytes = s.recv * kEsize;
      break;
    case REDUCE_SCATTER:  // in place: the result is the first block of send
      s.block = nominal / kEsize / n ? nominal / kEsize / n : 1;
      s.send = n * s.block;
      s.recv = 0;
      s.bytes = s.send * kEsize;
      break;
    case ALLTOALL:
      s.block = nominal / kEsize / n ? nominal / kEsize / n : 1;
      s.send = s.recv = n * s.block;
      s.bytes = s.send * kEsize;
      break;
    default:
      break;
  }
  return s;
}

double busbwFactor(Coll c, int world) {
  double n = world;
  switch (c) {
    case ALLREDUCE: return 2.0 * (n - 1) / n;
    case ALLGATHER: case REDUCE_SCATTER: case ALLTOALL: return (n - 1) / n;
    default: return 1.0;
  }
}

// Rank r's contribution at index i; alltoall: what src sends dst at index j.
float val(int r, size_t i) { return float((size_t(r) * 7 + i) % kPeriod); }
float a2a(int src, int dst, size_t j) { return float((size_t(src) * 5 + size_t(dst) * 3 + j) % kPeriod); }

class Bench {
 public:
  Bench(const Opts& o, std::shared_ptr<gloo::Context> ctx) : o_(o), ctx_(std::move(ctx)) {
    for (int r = 0; r < o_.world; r++)
      for (size_t i = 0; i < kPeriod; i++) sums_[i] += val(r, i);
  }

  // Measures one size; returns the number of wrong elements over all ranks.
  double runSize(const Shape& s) {
    const Coll c = o_.coll;
    std::vector<float> send(s.send ? s.send : 1), recv(s.recv ? s.recv : 1);
    std::function<void()> call = makeCall(s, send.data(), recv.data());
    double wrong = 0;
    long iters = o_.iters, warmup = o_.warmup;

    fillInputs(s, send.data(), recv.data());
    if (o_.check) {
      barrier();
      call();
      wrong = double(countWrong(s, send.data(), recv.data()));
    }
    if (iters == 0) {
      long scaled = long((size_t(1) << 30) / (s.bytes ? s.bytes : 1));
      iters = scaled < 3 ? 3 : (scaled > 1000 ? 1000 : scaled);
    }
    if (warmup < 0) warmup = iters / 10 < 1 ? 1 : (iters / 10 > 20 ? 20 : iters / 10);
    barrier();
    auto t0 = std::chrono::steady_clock::now();
    for (long i = 0; i < warmup; i++) call();
    double t = reduceScalar(secondsSince(t0) / double(warmup ? warmup : 1), true);
    if (o_.iters == 0 && warmup > 0 && t * double(iters) > o_.budgetS) {
      long fit = long(o_.budgetS / t);
      iters = fit < 3 ? 3 : fit;
    }
    barrier();
    t0 = std::chrono::steady_clock::now();
    for (long i = 0; i < iters; i++) call();
    t = reduceScalar(secondsSince(t0) / double(iters), true);
    wrong = reduceScalar(wrong, false);
    if (o_.rank == 0) {
      double algbw = double(s.bytes) / t / 1e9;
      printf("gloo coll=%s n=%d bytes=%zu time_us=%.1f busbw_GBs=%.3f\n", kCollNames[c], o_.world,
             s.bytes, t * 1e6, algbw * busbwFactor(c, o_.world));
      fflush(stdout);
      if (wrong > 0)
        fprintf(stderr, "gloo_colls: CHECK FAILED coll=%s n=%d bytes=%zu wrong=%.0f\n",
                kCollNames[c], o_.world, s.bytes, wrong);
    }
    return wrong;
  }

 private:
  static double secondsSince(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }

  void barrier() {
    gloo::BarrierOptions b(ctx_);
    gloo::barrier(b);
  }

  // Max (or sum) of one double over all ranks, everywhere.
  double reduceScalar(double v, bool max) {
    gloo::AllreduceOptions a(ctx_);
    a.setOutput(&v, 1);
    if (max)
      a.setReduceFunction(static_cast<void (*)(void*, const void*, const void*, size_t)>(&gloo::max<double>));
    else
      a.setReduceFunction(static_cast<void (*)(void*, const void*, const void*, size_t)>(&gloo::sum<double>));
    gloo::allreduce(a);
    return v;
  }

  // The collective on these buffers, set up once per size (algorithm
  // objects allocate their scratch and register slots when constructed).
  std::function<void()> makeCall(const Shape& s, float* send, float* recv) {
    const auto sumf = static_cast<void (*)(void*, const void*, const void*, size_t)>(&gloo::sum<float>);
    switch (o_.coll) {
      case ALLREDUCE: {
        auto ar = std::make_shared<gloo::AllreduceRingChunked<float>>(
            ctx_, std::vector<float*>{send}, int(s.send));
        return [ar] { ar->run(); };
      }
      case ALLGATHER: {
        auto opts = std::make_shared<gloo::AllgatherOptions>(ctx_);
        opts->setInput(send, s.send);
        opts->setOutput(recv, s.recv);
        return [opts] { gloo::allgather(*opts); };
      }
      case REDUCE_SCATTER: {
        auto rs = std::make_shared<gloo::ReduceScatterHalvingDoubling<float>>(
            ctx_, std::vector<float*>{send}, int(s.send), std::vector<int>(size_t(o_.world), int(s.block)));
        return [rs] { rs->run(); };
      }
      case BROADCAST: {
        auto opts = std::make_shared<gloo::BroadcastOptions>(ctx_);
        opts->setOutput(recv, s.recv);
        opts->setRoot(kRoot);
        return [opts] { gloo::broadcast(*opts); };
      }
      case REDUCE: {
        auto opts = std::make_shared<gloo::ReduceOptions>(ctx_);
        opts->setInput(send, s.send);
        opts->setOutput(recv, s.recv);
        opts->setRoot(kRoot);
        opts->setReduceFunction(sumf);
        return [opts] { gloo::reduce(*opts); };
      }
      case ALLTOALL: {
        auto opts = std::make_shared<gloo::AlltoallOptions>(ctx_);
        opts->setInput(send, s.send);
        opts->setOutput(recv, s.recv);
        return [opts] { gloo::alltoall(*opts); };
      }
      case BARRIER:
      default: {
        auto opts = std::make_shared<gloo::BarrierOptions>(ctx_);
        return [opts] { gloo::barrier(*opts); };
      }
    }
  }

  void fillInputs(const Shape& s, float* send, float* recv) {
    for (size_t i = 0; i < s.recv; i++) recv[i] = -1.0f;
    if (o_.coll == ALLTOALL) {
      for (int d = 0; d < o_.world; d++)
        for (size_t j = 0; j < s.block; j++) send[size_t(d) * s.block + j] = a2a(o_.rank, d, j);
    } else if (o_.coll == BROADCAST) {
      if (o_.rank == kRoot)
        for (size_t i = 0; i < s.recv; i++) recv[i] = val(kRoot, i);
    } else {
      for (size_t i = 0; i < s.send; i++) send[i] = val(o_.rank, i);
    }
  }

  size_t countWrong(const Shape& s, const float* send, const float* recv) const {
    size_t wrong = 0;
    const int rank = o_.rank;
    switch (o_.coll) {
      case ALLREDUCE:  // in place
        for (size_t i = 0; i < s.send; i++) wrong += send[i] != sums_[i % kPeriod];
        break;
      case REDUCE:
        if (rank == kRoot)
          for (size_t i = 0; i < s.recv; i++) wrong += recv[i] != sums_[i % kPeriod];
        break;
      case REDUCE_SCATTER:  // in place, this rank's block at the front
        for (size_t j = 0; j < s.block; j++)
          wrong += send[j] != sums_[(size_t(rank) * s.block + j) % kPeriod];
        break;
      case ALLGATHER:
        for (int r = 0; r < o_.world; r++)
          for (size_t j = 0; j < s.block; j++) wrong += recv[size_t(r) * s.block + j] != val(r, j);
        break;
      case BROADCAST:
        for (size_t i = 0; i < s.recv; i++) wrong += recv[i] != val(kRoot, i);
        break;
      case ALLTOALL:
        for (int r = 0; r < o_.world; r++)
          for (size_t j = 0; j < s.block; j++)
            wrong += recv[size_t(r) * s.block + j] != a2a(r, rank, j);
        break;
      default:
        break;
    }
    return wrong;
  }

  const Opts& o_;
  std::shared_ptr<gloo::Context> ctx_;
  float sums_[kPeriod] = {};
};

}  // namespace

int main(int argc, char** argv) {
  const Opts o = parse(argc, argv);
  double wrong = 0;
  try {
    gloo::transport::tcp::attr attr;
    attr.iface = "lo";
    auto dev = gloo::transport::tcp::CreateDevice(attr);
    gloo::rendezvous::FileStore store(o.store);
    auto ctx = std::make_shared<gloo::rendezvous::Context>(o.rank, o.world);
    // Before any options object: they copy the context's timeout.
    ctx->setTimeout(std::chrono::seconds(600));
    ctx->connectFullMesh(store, dev);
    Bench bench(o, ctx);
    if (o.coll == BARRIER) {
      wrong += bench.runSize(Shape());
    } else {
      size_t last = 0;
      for (size_t b = o.minbytes; b <= o.maxbytes; b *= o.factor) {
        Shape s = shapeOf(o.coll, b, size_t(o.world));
        if (s.bytes != last) wrong += bench.runSize(s);
        last = s.bytes;
        if (b > o.maxbytes / o.factor) break;
      }
    }
  } catch (const std::exception& e) {
    fprintf(stderr, "gloo_colls: rank %d: %s\n", o.rank, e.what());
    return 1;
  }
  return wrong > 0 ? 1 : 0;
}
