// eccl._eccl: libeccl's public C API (include/eccl.h) for Python.
//
// The C library is the single source of truth: this module holds no
// protocol logic. It turns Python objects into the C call's arguments
// (a buffer's pointer, element count and dtype, taken straight from the
// numpy array or torch tensor, never copied), checks in Python's terms what
// the C call could not report as clearly (dtypes that differ, non-contiguous
// or read-only arrays, sizes that do not fit the layout), makes the call
// with the GIL released, and turns an eccl_result into the exception class
// of its code (defined in eccl/_errors.py and registered at import).
//
// Lifetimes:
//  - A communicator lives in a CommCore shared by the Comm object and every
//    Request it started. Calls hold CommCore::mu shared while inside the C
//    library; close() takes it exclusive, so eccl_comm_destroy never runs
//    under a call of another thread.
//  - An async Request holds the arrays it was given (and their buffer
//    exports, which also stop numpy from resizing them) until it completed.
//    A Request dropped unfinished waits for its op first: the C library
//    must not write into freed memory. Closing the communicator fails every
//    op still in flight with ECCL_ERR_CLOSED (eccl_comm_destroy frees them).
//
// Locks are always taken in the order CommCore::mu, CommCore::reqs_mu,
// ReqCore::mu, and never while waiting for the GIL.

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

#include "eccl.h"

namespace py = pybind11;

namespace {

// ---- errors -------------------------------------------------------------------

// eccl._errors._from_code(code, call, info) -> an instance of the code's
// class. Set once at import (eccl/__init__.py) and kept for the process's
// life: exceptions may be raised up to interpreter shutdown.
PyObject *g_make_error = nullptr;

[[noreturn]] void raise_eccl(eccl_result rc, const char *call, py::object info = py::none())
{
    if (g_make_error == nullptr)
        throw std::runtime_error(std::string(call) + ": " + eccl_strerror(rc) +
                                 " (eccl._eccl used without the eccl package)");
    py::object exc = py::reinterpret_borrow<py::object>(g_make_error)(static_cast<int>(rc), call, info);
    PyErr_SetObject(reinterpret_cast<PyObject *>(Py_TYPE(exc.ptr())), exc.ptr());
    throw py::error_already_set();
}

std::string str_cat(std::initializer_list<std::string> parts)
{
    std::string s;
    for (const auto &p : parts) s += p;
    return s;
}

[[noreturn]] void type_error(const char *call, const std::string &msg)
{
    throw py::type_error(std::string(call) + ": " + msg);
}

[[noreturn]] void value_error(const char *call, const std::string &msg)
{
    throw py::value_error(std::string(call) + ": " + msg);
}

// ---- buffers ------------------------------------------------------------------

// Torch is never imported by this module: a tensor can only exist once the
// program imported torch, so torch.Tensor and its dtypes are looked up in
// sys.modules on first need and kept (never released: they outlive us).
struct TorchTypes {
    PyObject *tensor_type = nullptr;
    std::vector<std::pair<PyObject *, eccl_dtype>> dtypes;
};
TorchTypes g_torch;

bool torch_loaded()
{
    if (g_torch.tensor_type != nullptr) return true;
    PyObject *torch = PyDict_GetItemString(PyImport_GetModuleDict(), "torch"); // borrowed
    if (torch == nullptr) return false;
    // torch may be half-way through its own import: then it has no Tensor
    // yet, and neither can the caller.
    PyObject *tensor = PyObject_GetAttrString(torch, "Tensor");
    if (tensor == nullptr || !PyType_Check(tensor)) {
        PyErr_Clear();
        Py_XDECREF(tensor);
        return false;
    }
    // Every dtype eccl and torch share; unsigned 16/32/64 exist from torch
    // 2.3 on, so each is taken only if this torch has it.
    static const std::pair<const char *, eccl_dtype> names[] = {
        {"int8", ECCL_I8},       {"uint8", ECCL_U8},     {"int16", ECCL_I16},  {"uint16", ECCL_U16},
        {"int32", ECCL_I32},     {"uint32", ECCL_U32},   {"int64", ECCL_I64},  {"uint64", ECCL_U64},
        {"float16", ECCL_F16},   {"bfloat16", ECCL_BF16}, {"float32", ECCL_F32}, {"float64", ECCL_F64},
    };
    for (const auto &n : names) {
        PyObject *dt = PyObject_GetAttrString(torch, n.first);
        if (dt == nullptr) {
            PyErr_Clear();
            continue;
        }
        g_torch.dtypes.emplace_back(dt, n.second); // the reference is kept
    }
    g_torch.tensor_type = tensor; // likewise
    return true;
}

bool is_torch_tensor(PyObject *o)
{
    return torch_loaded() && PyObject_TypeCheck(o, reinterpret_cast<PyTypeObject *>(g_torch.tensor_type));
}

// A buffer-protocol format (numpy's, array.array's, memoryview's) as an
// eccl dtype. Only native byte order: the wire carries host-order values.
bool dtype_from_format(const char *fmt, Py_ssize_t itemsize, eccl_dtype *out)
{
    static_assert(sizeof(void *) == 8 || sizeof(void *) == 4, "odd platform");
    if (fmt == nullptr) fmt = "B"; // "unsigned bytes" by the protocol's rules
    if (*fmt == '@' || *fmt == '=') fmt++;
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    if (*fmt == '<') fmt++;
#else
    if (*fmt == '>' || *fmt == '!') fmt++;
#endif
    if (fmt[0] == '\0' || fmt[1] != '\0') return false;
    bool is_signed;
    switch (fmt[0]) {
    case 'b': case 'h': case 'i': case 'l': case 'q': case 'n': is_signed = true; break;
    case 'B': case 'H': case 'I': case 'L': case 'Q': case 'N': is_signed = false; break;
    case 'e': if (itemsize != 2) return false; *out = ECCL_F16; return true;
    case 'f': if (itemsize != 4) return false; *out = ECCL_F32; return true;
    case 'd': if (itemsize != 8) return false; *out = ECCL_F64; return true;
    default: return false; // bool '?', char 'c', complex, structs, pointers
    }
    switch (itemsize) {
    case 1: *out = is_signed ? ECCL_I8 : ECCL_U8; return true;
    case 2: *out = is_signed ? ECCL_I16 : ECCL_U16; return true;
    case 4: *out = is_signed ? ECCL_I32 : ECCL_U32; return true;
    case 8: *out = is_signed ? ECCL_I64 : ECCL_U64; return true;
    default: return false;
    }
}

std::string type_name(py::handle obj)
{
    return Py_TYPE(obj.ptr())->tp_name;
}

enum class Access { Read, Write };

// One array's memory as the C call sees it. Holds the object and, for the
// buffer protocol, the export: both released with the GIL held (every
// Buffer lives and dies outside the calls' GIL-free sections).
struct Buffer {
    void *ptr = nullptr;
    size_t count = 0;
    eccl_dtype dtype = ECCL_U8;
    bool device = false;   // CUDA memory (a torch CUDA tensor)
    int device_index = -1; // its CUDA device
    py::object owner;      // the array or tensor itself
    Py_buffer view{};
    bool has_view = false;

    Buffer() = default;
    Buffer(const Buffer &) = delete;
    Buffer &operator=(const Buffer &) = delete;
    Buffer(Buffer &&o) noexcept { take(o); }
    Buffer &operator=(Buffer &&o) noexcept
    {
        if (this != &o) {
            release();
            take(o);
        }
        return *this;
    }
    ~Buffer() { release(); }

    void release()
    {
        if (has_view) {
            PyBuffer_Release(&view);
            has_view = false;
        }
        owner = py::object();
    }

private:
    void take(Buffer &o)
    {
        ptr = o.ptr;
        count = o.count;
        dtype = o.dtype;
        device = o.device;
        device_index = o.device_index;
        owner = std::move(o.owner);
        view = o.view;
        has_view = o.has_view;
        o.has_view = false;
    }
};

void torch_buffer(Buffer &b, py::handle obj, const char *call, const char *what)
{
    py::object dt = obj.attr("dtype");
    bool known = false;
    for (const auto &d : g_torch.dtypes)
        if (d.first == dt.ptr()) {
            b.dtype = d.second;
            known = true;
            break;
        }
    if (!known)
        type_error(call, str_cat({what, " has dtype ", py::str(dt).cast<std::string>(),
                                  ", which eccl has no type for (int8/16/32/64, uint8, float16, bfloat16, "
                                  "float32, float64)"}));
    if (!obj.attr("is_contiguous")().cast<bool>())
        value_error(call, str_cat({what, " is not contiguous: eccl reads and writes the tensor's memory in place "
                                         "(pass a .contiguous() tensor, which copies)"}));
    std::string kind = obj.attr("device").attr("type").cast<std::string>();
    if (kind == "cuda") {
        b.device = true;
        b.device_index = obj.attr("device").attr("index").cast<int>();
    } else if (kind != "cpu") {
        type_error(call, str_cat({what, " is on device '", kind, "': eccl takes CPU and CUDA tensors"}));
    }
    b.count = obj.attr("numel")().cast<size_t>();
    b.ptr = reinterpret_cast<void *>(obj.attr("data_ptr")().cast<uintptr_t>());
    b.owner = py::reinterpret_borrow<py::object>(obj);
}

// The memory of a numpy array, a torch tensor or any object with the buffer
// protocol, without a copy. `what` names the argument in messages.
Buffer get_buffer(py::handle obj, Access access, const char *call, const char *what)
{
    Buffer b;
    PyObject *o = obj.ptr();
    if (obj.is_none()) type_error(call, str_cat({what, " is None"}));
    if (PyObject_CheckBuffer(o)) {
        // Strides and format, read-only allowed: contiguity and writability
        // are checked here, to say what is wrong in eccl's words.
        if (PyObject_GetBuffer(o, &b.view, PyBUF_RECORDS_RO) != 0) throw py::error_already_set();
        b.has_view = true;
        if (!dtype_from_format(b.view.format, b.view.itemsize, &b.dtype))
            type_error(call, str_cat({what, " (", type_name(obj), ") has element format '",
                                      b.view.format ? b.view.format : "B",
                                      "', which eccl has no type for (int8/16/32/64, uint8/16/32/64, "
                                      "float16, float32, float64)"}));
        if (!PyBuffer_IsContiguous(&b.view, 'C'))
            value_error(call, str_cat({what, " is not C-contiguous: eccl reads and writes the array's memory in "
                                             "place (pass numpy.ascontiguousarray(x), which copies)"}));
        if (access == Access::Write && b.view.readonly)
            value_error(call, str_cat({what, " is read-only, and the call writes into it"}));
        b.ptr = b.view.buf;
        b.count = static_cast<size_t>(b.view.len / b.view.itemsize);
        b.owner = py::reinterpret_borrow<py::object>(obj);
        return b;
    }
    if (is_torch_tensor(o)) {
        torch_buffer(b, obj, call, what);
        return b;
    }
    type_error(call, str_cat({what, " must be a numpy array, a torch tensor or another object with the buffer "
                                    "protocol, not ",
                              type_name(obj)}));
}

void check_same_dtype(const Buffer &a, const Buffer &b, const char *call, const char *aname, const char *bname)
{
    if (a.dtype != b.dtype)
        type_error(call, str_cat({aname, " is ", eccl_dtype_name(a.dtype), " but ", bname, " is ",
                                  eccl_dtype_name(b.dtype), ": both must have the same dtype"}));
    if (a.device != b.device)
        value_error(call, str_cat({aname, " and ", bname,
                                   " must both be host memory or both CUDA memory (one call, one kind)"}));
}

void check_count(size_t have, size_t want, const char *call, const std::string &what)
{
    if (have != want)
        value_error(call, str_cat({what, " has ", std::to_string(have), " elements, ", std::to_string(want),
                                   " expected"}));
}

// torch's current CUDA stream of the buffer's device, for the calls that
// take one (eccl_allreduce_opts.stream): the C call then orders itself
// after the work queued there, as NCCL does. Host memory: none.
void *torch_stream(const Buffer &b)
{
    if (!b.device) return nullptr;
    py::object stream = py::module_::import("torch.cuda").attr("current_stream")(b.device_index);
    return reinterpret_cast<void *>(stream.attr("cuda_stream").cast<uintptr_t>());
}

// The calls without a stream read device buffers after the legacy default
// stream's work. Work that torch queued on another current stream is
// waited for here, on the host, so that it is in place when the C call
// reads the buffer.
void torch_sync_current_stream(const Buffer &b)
{
    if (!b.device) return;
    py::object stream = py::module_::import("torch.cuda").attr("current_stream")(b.device_index);
    if (stream.attr("cuda_stream").cast<uintptr_t>() != 0) stream.attr("synchronize")();
}

// ---- communicator core -----------------------------------------------------------

struct ReqCore {
    std::mutex mu;
    eccl_request *req = nullptr; // null once completed (the C library freed it)
    bool done = true;            // until attach(): nothing in flight
    eccl_result rc = ECCL_OK;
    eccl_reduce_info info{};
};

struct CommCore {
    std::shared_mutex mu; // shared: a call is inside the C library; exclusive: destroy
    eccl_comm *comm = nullptr;
    std::mutex reqs_mu;
    std::unordered_set<ReqCore *> live; // requests not yet destroyed

    ~CommCore() { close(); }

    // f(comm) with the GIL released and the communicator held open; a
    // closed communicator answers ECCL_ERR_CLOSED without calling f.
    template <class F> eccl_result run(F &&f)
    {
        py::gil_scoped_release nogil;
        std::shared_lock<std::shared_mutex> lock(mu);
        if (comm == nullptr) return ECCL_ERR_CLOSED;
        return f(comm);
    }

    // Callable with or without the GIL (the caller releases it if it can).
    void close()
    {
        std::unique_lock<std::shared_mutex> lock(mu);
        if (comm == nullptr) return;
        eccl_comm_destroy(comm); // fails (buffers restored) and frees every op in flight
        comm = nullptr;
        std::lock_guard<std::mutex> g(reqs_mu);
        for (ReqCore *r : live) {
            std::lock_guard<std::mutex> rg(r->mu);
            if (!r->done) {
                r->req = nullptr;
                r->done = true;
                r->rc = ECCL_ERR_CLOSED;
            }
        }
    }
};

// ---- async requests ------------------------------------------------------------------

class Request {
public:
    Request(std::shared_ptr<CommCore> comm, const char *call, std::vector<Buffer> bufs)
        : comm_(std::move(comm)), call_(call), bufs_(std::move(bufs))
    {
    }
    Request(const Request &) = delete;
    Request &operator=(const Request &) = delete;

    // Called by the comm, under its shared lock, right after the C call
    // started the op: from then on close() knows of it.
    void attach(eccl_request *req)
    {
        core_.req = req;
        core_.done = false;
        std::lock_guard<std::mutex> g(comm_->reqs_mu);
        comm_->live.insert(&core_);
    }

    ~Request()
    {
        if (!core_.done) {
            // The op may still write into our arrays: they stay alive until it
            // ended (at most the communicator's op_timeout_ms).
            py::gil_scoped_release nogil;
            complete_blocking();
        }
        {
            std::lock_guard<std::mutex> g(comm_->reqs_mu);
            comm_->live.erase(&core_);
        }
        bufs_.clear(); // GIL held here
    }

    eccl_reduce_info wait()
    {
        {
            py::gil_scoped_release nogil;
            complete_blocking();
        }
        return finish();
    }

    // True once done (raising the op's error if it failed), False while it
    // runs. Never blocks.
    bool test()
    {
        bool done;
        {
            py::gil_scoped_release nogil;
            std::shared_lock<std::shared_mutex> lock(comm_->mu);
            std::lock_guard<std::mutex> g(core_.mu);
            if (!core_.done) {
                int flag = 0;
                eccl_result rc = eccl_test(core_.req, &flag, &core_.info);
                if (flag || rc != ECCL_OK) {
                    core_.req = nullptr;
                    core_.done = true;
                    core_.rc = rc;
                }
            }
            done = core_.done;
        }
        if (!done) return false;
        finish();
        return true;
    }

    bool done()
    {
        std::lock_guard<std::mutex> g(core_.mu);
        return core_.done;
    }

    const char *call() const { return call_; }

private:
    void complete_blocking()
    {
        std::shared_lock<std::shared_mutex> lock(comm_->mu);
        std::lock_guard<std::mutex> g(core_.mu);
        if (core_.done) return;
        core_.rc = eccl_wait(core_.req, &core_.info);
        core_.req = nullptr;
        core_.done = true;
    }

    // GIL held, op done: drop the arrays, report the outcome (again, if
    // asked again).
    eccl_reduce_info finish()
    {
        bufs_.clear();
        if (core_.rc != ECCL_OK) raise_eccl(core_.rc, call_, py::cast(core_.info));
        return core_.info;
    }

    std::shared_ptr<CommCore> comm_;
    const char *call_;
    std::vector<Buffer> bufs_;
    ReqCore core_;
};

// ---- communicator ------------------------------------------------------------------

// Result of a layout check made inside the GIL-free section (world size and
// rank are read there, next to the call they lay out): reported as a
// ValueError once the GIL is back.
struct LayoutError {
    bool bad = false;
    std::string msg;
    void set(std::string m)
    {
        bad = true;
        msg = std::move(m);
    }
};

// The layout all-gather and reduce-scatter share: `whole` holds one block of
// `*count` elements per rank, `block` one. In place, `block` is this rank's
// block of `whole` (its pointer is set here). Names are the caller's
// argument names, for the message.
void block_layout(bool in_place, void *whole_ptr, size_t whole_count, void **block_ptr, size_t block_count,
                  size_t esize, int64_t world, int64_t rank, const char *whole_name, const char *block_name,
                  size_t *count, LayoutError &err)
{
    if (in_place) {
        if (whole_count % world != 0) {
            err.set(std::string(whole_name) + "'s " + std::to_string(whole_count) + " elements are not " +
                    std::to_string(world) + " equal blocks (one per rank of the world)");
            return;
        }
        *count = whole_count / world;
        *block_ptr = static_cast<char *>(whole_ptr) + rank * *count * esize;
    } else {
        *count = block_count;
        if (whole_count != block_count * world)
            err.set(std::string(whole_name) + " has " + std::to_string(whole_count) + " elements, world size " +
                    std::to_string(world) + " x " + block_name + "'s " + std::to_string(block_count) + " = " +
                    std::to_string(block_count * world) + " expected");
    }
}

std::vector<size_t> size_list(const py::object &obj, const char *call, const char *what)
{
    std::vector<size_t> v;
    try {
        v = obj.cast<std::vector<size_t>>();
    } catch (const py::cast_error &) {
        type_error(call, str_cat({what, " must be a sequence of non-negative ints"}));
    }
    return v;
}

class Comm {
public:
    Comm(const std::string &master_addr, const py::object &p2p_host, const py::object &peer_group,
         const py::object &p2p_pool_size, const py::object &connect_timeout_ms, const py::object &op_timeout_ms,
         const py::object &peer_timeout_ms)
        : core_(std::make_shared<CommCore>()), master_addr_(master_addr)
    {
        eccl_comm_params p;
        eccl_comm_params_init(&p); // the C library's defaults, for every argument left None
        p.master_addr = master_addr_.c_str();
        if (!p2p_host.is_none()) {
            p2p_host_ = p2p_host.cast<std::string>();
            p.p2p_host = p2p_host_.c_str();
        }
        if (!peer_group.is_none()) p.peer_group = peer_group.cast<uint32_t>();
        if (!p2p_pool_size.is_none()) p.p2p_pool_size = p2p_pool_size.cast<uint32_t>();
        if (!connect_timeout_ms.is_none()) p.connect_timeout_ms = connect_timeout_ms.cast<uint32_t>();
        if (!op_timeout_ms.is_none()) p.op_timeout_ms = op_timeout_ms.cast<uint32_t>();
        if (!peer_timeout_ms.is_none()) p.peer_timeout_ms = peer_timeout_ms.cast<uint32_t>();
        eccl_comm *c = nullptr;
        eccl_result rc;
        {
            py::gil_scoped_release nogil;
            rc = eccl_comm_create(&p, &c);
        }
        if (rc != ECCL_OK) raise_eccl(rc, "Comm");
        core_->comm = c;
    }

    ~Comm()
    {
        py::gil_scoped_release nogil;
        core_->close();
    }

    void connect()
    {
        check(core_->run([](eccl_comm *c) { return eccl_comm_connect(c); }), "connect");
        connected_ = true;
    }

    void close()
    {
        py::gil_scoped_release nogil;
        core_->close();
    }

    bool closed()
    {
        std::shared_lock<std::shared_mutex> lock(core_->mu);
        return core_->comm == nullptr;
    }

    bool connected() const { return connected_; }
    const std::string &master_addr() const { return master_addr_; }

    void leave() { check(core_->run([](eccl_comm *c) { return eccl_comm_leave(c); }), "leave"); }

    uint32_t peers_pending()
    {
        uint32_t pending = 0;
        check(core_->run([&](eccl_comm *c) { return eccl_comm_peers_pending(c, &pending); }), "peers_pending");
        return pending;
    }

    void update_topology()
    {
        check(core_->run([](eccl_comm *c) { return eccl_comm_update_topology(c); }), "update_topology");
    }

    int64_t get_attr(eccl_attr attr)
    {
        int64_t v = 0;
        check(core_->run([&](eccl_comm *c) { return eccl_comm_get_attr(c, attr, &v); }), "get_attr");
        return v;
    }

    void trace_dump(const std::string &why)
    {
        check(core_->run([&](eccl_comm *c) { return eccl_comm_trace_dump(c, why.c_str()); }), "trace_dump");
    }

    // ---- all-reduce ----

    eccl_reduce_info all_reduce(py::handle send, py::handle recv, eccl_op op, uint64_t tag, eccl_quant_type quant)
    {
        const char *call = "all_reduce";
        Buffer s, r;
        pair(send, recv, call, s, r);
        eccl_allreduce_opts opts = reduce_opts(s, quant);
        eccl_reduce_info info{};
        eccl_result rc = core_->run([&](eccl_comm *c) {
            return eccl_allreduce_ex(c, s.ptr, out(s, r), s.count, s.dtype, op, tag, &opts, &info);
        });
        return done(rc, call, info);
    }

    std::unique_ptr<Request> all_reduce_async(py::handle send, py::handle recv, eccl_op op, uint64_t tag,
                                              eccl_quant_type quant)
    {
        const char *call = "all_reduce_async";
        Buffer s, r;
        pair(send, recv, call, s, r);
        eccl_allreduce_opts opts = reduce_opts(s, quant);
        void *sp = s.ptr, *rp = out(s, r);
        size_t count = s.count;
        eccl_dtype dtype = s.dtype;
        return start(call, std::move(s), std::move(r), [&](eccl_comm *c, eccl_request **req) {
            return eccl_allreduce_ex_async(c, sp, rp, count, dtype, op, tag, &opts, req);
        });
    }

    // A batch of in-place or (send, recv) all-reduces, re-issued on peer
    // loss by the C library until all succeed or too few peers remain.
    py::list all_reduce_multiple_with_retry(const py::sequence &bufs, eccl_op op, const py::object &tags,
                                            uint32_t max_in_flight, eccl_quant_type quant)
    {
        const char *call = "all_reduce_multiple_with_retry";
        size_t n = py::len(bufs);
        std::vector<Buffer> keep;
        keep.reserve(2 * n);
        std::vector<eccl_allreduce_desc> descs(n);
        std::vector<uint64_t> tag_list(n);
        if (tags.is_none()) {
            for (size_t i = 0; i < n; i++) tag_list[i] = i;
        } else {
            try {
                tag_list = tags.cast<std::vector<uint64_t>>();
            } catch (const py::cast_error &) {
                type_error(call, "tags must be a sequence of ints");
            }
            check_count(tag_list.size(), n, call, "tags");
        }
        eccl_allreduce_opts opts;
        eccl_allreduce_opts_init(&opts);
        opts.quant = quant;
        bool device = false;
        for (size_t i = 0; i < n; i++) {
            py::object item = bufs[i];
            Buffer s, r;
            if (py::isinstance<py::tuple>(item) && py::len(item) == 2)
                pair(item[py::int_(0)], item[py::int_(1)], call, s, r);
            else
                pair(item, py::none(), call, s, r);
            if (i > 0 && s.device != device)
                value_error(call, "every buffer must be host memory, or every one CUDA memory");
            device = s.device;
            descs[i] = eccl_allreduce_desc{s.ptr, out(s, r), s.count, s.dtype, op, tag_list[i], &opts};
            keep.push_back(std::move(s));
            keep.push_back(std::move(r));
        }
        if (n > 0) opts.stream = torch_stream(keep[0]);
        std::vector<eccl_reduce_info> infos(n);
        eccl_result rc = core_->run([&](eccl_comm *c) {
            return eccl_allreduce_multiple_with_retry(c, descs.data(), n, max_in_flight, infos.data());
        });
        py::list out_infos;
        for (const auto &info : infos) out_infos.append(py::cast(info));
        if (rc != ECCL_OK) raise_eccl(rc, call, out_infos);
        return out_infos;
    }

    // ---- all-gather / reduce-scatter ----

    eccl_reduce_info all_gather(py::handle send, py::handle recv, uint64_t tag)
    {
        return gather_like(send, recv, tag, nullptr)->info_;
    }
    std::unique_ptr<Request> all_gather_async(py::handle send, py::handle recv, uint64_t tag)
    {
        std::unique_ptr<Request> req;
        gather_like(send, recv, tag, &req);
        return req;
    }

    eccl_reduce_info reduce_scatter(py::handle send, py::handle recv, eccl_op op, uint64_t tag,
                                    eccl_quant_type quant)
    {
        return scatter_like(send, recv, op, tag, quant, nullptr)->info_;
    }
    std::unique_ptr<Request> reduce_scatter_async(py::handle send, py::handle recv, eccl_op op, uint64_t tag,
                                                  eccl_quant_type quant)
    {
        std::unique_ptr<Request> req;
        scatter_like(send, recv, op, tag, quant, &req);
        return req;
    }

    eccl_reduce_info all_gatherv(py::handle send, py::handle recv, const py::object &counts,
                                 const py::object &displs, uint64_t tag)
    {
        return gatherv_like(send, recv, counts, displs, tag, nullptr)->info_;
    }
    std::unique_ptr<Request> all_gatherv_async(py::handle send, py::handle recv, const py::object &counts,
                                               const py::object &displs, uint64_t tag)
    {
        std::unique_ptr<Request> req;
        gatherv_like(send, recv, counts, displs, tag, &req);
        return req;
    }

    eccl_reduce_info reduce_scatterv(py::handle send, py::handle recv, const py::object &counts, eccl_op op,
                                     uint64_t tag)
    {
        return scatterv_like(send, recv, counts, op, tag, nullptr)->info_;
    }
    std::unique_ptr<Request> reduce_scatterv_async(py::handle send, py::handle recv, const py::object &counts,
                                                   eccl_op op, uint64_t tag)
    {
        std::unique_ptr<Request> req;
        scatterv_like(send, recv, counts, op, tag, &req);
        return req;
    }

    // ---- broadcast / reduce ----

    eccl_reduce_info broadcast(py::handle send, py::handle recv, uint32_t root, uint64_t tag)
    {
        const char *call = "broadcast";
        Buffer s, r;
        pair(send, recv, call, s, r);
        torch_sync_current_stream(s);
        eccl_reduce_info info{};
        eccl_result rc = core_->run([&](eccl_comm *c) {
            return eccl_broadcast(c, s.ptr, out(s, r), s.count, s.dtype, root, tag, &info);
        });
        return done(rc, call, info);
    }
    std::unique_ptr<Request> broadcast_async(py::handle send, py::handle recv, uint32_t root, uint64_t tag)
    {
        const char *call = "broadcast_async";
        Buffer s, r;
        pair(send, recv, call, s, r);
        torch_sync_current_stream(s);
        void *sp = s.ptr, *rp = out(s, r);
        size_t count = s.count;
        eccl_dtype dtype = s.dtype;
        return start(call, std::move(s), std::move(r), [&](eccl_comm *c, eccl_request **req) {
            return eccl_broadcast_async(c, sp, rp, count, dtype, root, tag, req);
        });
    }

    eccl_reduce_info reduce(py::handle send, py::handle recv, uint32_t root, eccl_op op, uint64_t tag)
    {
        const char *call = "reduce";
        Buffer s, r;
        pair(send, recv, call, s, r);
        torch_sync_current_stream(s);
        eccl_reduce_info info{};
        eccl_result rc = core_->run([&](eccl_comm *c) {
            return eccl_reduce(c, s.ptr, out(s, r), s.count, s.dtype, op, root, tag, &info);
        });
        return done(rc, call, info);
    }
    std::unique_ptr<Request> reduce_async(py::handle send, py::handle recv, uint32_t root, eccl_op op,
                                          uint64_t tag)
    {
        const char *call = "reduce_async";
        Buffer s, r;
        pair(send, recv, call, s, r);
        torch_sync_current_stream(s);
        void *sp = s.ptr, *rp = out(s, r);
        size_t count = s.count;
        eccl_dtype dtype = s.dtype;
        return start(call, std::move(s), std::move(r), [&](eccl_comm *c, eccl_request **req) {
            return eccl_reduce_async(c, sp, rp, count, dtype, op, root, tag, req);
        });
    }

    // ---- all-to-all ----

    eccl_reduce_info all_to_all(py::handle send, py::handle recv, uint64_t tag)
    {
        return alltoall_like(send, recv, tag, nullptr)->info_;
    }
    std::unique_ptr<Request> all_to_all_async(py::handle send, py::handle recv, uint64_t tag)
    {
        std::unique_ptr<Request> req;
        alltoall_like(send, recv, tag, &req);
        return req;
    }

    eccl_reduce_info all_to_allv(py::handle send, py::handle recv, const py::object &sendcounts,
                                 const py::object &sdispls, const py::object &recvcounts, const py::object &rdispls,
                                 uint64_t tag)
    {
        return alltoallv_like(send, recv, sendcounts, sdispls, recvcounts, rdispls, tag, nullptr)->info_;
    }
    std::unique_ptr<Request> all_to_allv_async(py::handle send, py::handle recv, const py::object &sendcounts,
                                               const py::object &sdispls, const py::object &recvcounts,
                                               const py::object &rdispls, uint64_t tag)
    {
        std::unique_ptr<Request> req;
        alltoallv_like(send, recv, sendcounts, sdispls, recvcounts, rdispls, tag, &req);
        return req;
    }

    // ---- point to point, barrier ----

    eccl_reduce_info send(py::handle buf, uint32_t peer, uint64_t tag)
    {
        return p2p_like(buf, true, peer, tag, nullptr)->info_;
    }
    std::unique_ptr<Request> send_async(py::handle buf, uint32_t peer, uint64_t tag)
    {
        std::unique_ptr<Request> req;
        p2p_like(buf, true, peer, tag, &req);
        return req;
    }

    eccl_reduce_info recv(py::handle buf, uint32_t peer, uint64_t tag)
    {
        return p2p_like(buf, false, peer, tag, nullptr)->info_;
    }
    std::unique_ptr<Request> recv_async(py::handle buf, uint32_t peer, uint64_t tag)
    {
        std::unique_ptr<Request> req;
        p2p_like(buf, false, peer, tag, &req);
        return req;
    }

    void barrier(uint64_t tag)
    {
        check(core_->run([&](eccl_comm *c) { return eccl_barrier(c, tag); }), "barrier");
    }
    std::unique_ptr<Request> barrier_async(uint64_t tag)
    {
        return start("barrier_async", Buffer(), Buffer(),
                     [&](eccl_comm *c, eccl_request **req) { return eccl_barrier_async(c, tag, req); });
    }

    // ---- shared state ----

    // keys[i] names bufs[i]; unvoted[i]: allow_content_inequality. Returns
    // (SyncInfo, the elected revision). eccl.Comm.sync_shared_state wraps
    // this with eccl.SharedState.
    std::pair<eccl_sync_info, uint64_t> sync_shared_state(const std::vector<std::string> &keys,
                                                          const py::sequence &bufs,
                                                          const std::vector<bool> &unvoted, uint64_t revision,
                                                          eccl_sync_strategy strategy, eccl_hash_type hash)
    {
        const char *call = "sync_shared_state";
        size_t n = keys.size();
        check_count(py::len(bufs), n, call, "the tensor list");
        check_count(unvoted.size(), n, call, "the unvoted flags");
        std::vector<Buffer> keep;
        keep.reserve(n);
        std::vector<eccl_tensor_info> infos(n);
        std::unordered_set<std::string> seen;
        for (size_t i = 0; i < n; i++) {
            if (keys[i].empty() || keys[i].size() > 63)
                value_error(call, str_cat({"key '", keys[i], "' must be 1 to 63 bytes"}));
            if (!seen.insert(keys[i]).second) value_error(call, str_cat({"key '", keys[i], "' appears twice"}));
            std::string what = "tensor '" + keys[i] + "'";
            Buffer b = get_buffer(bufs[i], Access::Write, call, what.c_str());
            torch_sync_current_stream(b);
            infos[i] = eccl_tensor_info{keys[i].c_str(), b.ptr, b.count, b.dtype, unvoted[i] ? 1 : 0};
            keep.push_back(std::move(b));
        }
        eccl_shared_state state{revision, n, infos.data()};
        eccl_sync_info info{};
        eccl_result rc = core_->run(
            [&](eccl_comm *c) { return eccl_comm_sync_shared_state(c, &state, strategy, hash, &info); });
        if (rc != ECCL_OK) raise_eccl(rc, call, py::cast(info));
        return {info, state.revision};
    }

    // ---- topology ----

    eccl_topo_info optimize_topology(const py::object &probe_ms, const py::object &probe_conns,
                                     const py::object &max_rounds)
    {
        eccl_topo_opts opts;
        eccl_topo_opts_init(&opts); // the C defaults for what is left None
        if (!probe_ms.is_none()) opts.probe_ms = probe_ms.cast<uint32_t>();
        if (!probe_conns.is_none()) opts.probe_conns = probe_conns.cast<uint32_t>();
        if (!max_rounds.is_none()) opts.max_rounds = max_rounds.cast<uint32_t>();
        eccl_topo_info info{};
        eccl_result rc = core_->run([&](eccl_comm *c) { return eccl_comm_optimize_topology(c, &opts, &info); });
        if (rc != ECCL_OK) raise_eccl(rc, "optimize_topology", py::cast(info));
        return info;
    }

private:
    // The blocking forms of the layout-checked collectives share their
    // code with the async ones; this carries the blocking call's info.
    struct Blocking {
        eccl_reduce_info info_{};
    };

    void check(eccl_result rc, const char *call)
    {
        if (rc != ECCL_OK) raise_eccl(rc, call);
    }

    eccl_reduce_info done(eccl_result rc, const char *call, const eccl_reduce_info &info)
    {
        if (rc != ECCL_OK) raise_eccl(rc, call, py::cast(info));
        return info;
    }

    // send, and recv unless None (None: in place, the result in send).
    void pair(py::handle send, py::handle recv, const char *call, Buffer &s, Buffer &r)
    {
        bool in_place = recv.is_none() || recv.ptr() == send.ptr();
        s = get_buffer(send, in_place ? Access::Write : Access::Read, call, in_place ? "buf" : "sendbuf");
        if (in_place) return;
        r = get_buffer(recv, Access::Write, call, "recvbuf");
        check_same_dtype(s, r, call, "sendbuf", "recvbuf");
        check_count(r.count, s.count, call, "recvbuf");
    }

    static void *out(const Buffer &s, const Buffer &r) { return r.owner ? r.ptr : s.ptr; }

    eccl_allreduce_opts reduce_opts(const Buffer &s, eccl_quant_type quant)
    {
        eccl_allreduce_opts opts;
        eccl_allreduce_opts_init(&opts);
        opts.quant = quant;
        opts.stream = torch_stream(s);
        return opts;
    }

    // Starts an async op: `begin(comm, &req)` makes the C call (with
    // pointers taken from the buffers before they moved here: a move keeps
    // them), and the Request keeps the buffers until the op ended.
    template <class F> std::unique_ptr<Request> start(const char *call, Buffer a, Buffer b, F &&begin)
    {
        std::vector<Buffer> bufs;
        bufs.push_back(std::move(a));
        bufs.push_back(std::move(b));
        auto req = std::make_unique<Request>(core_, call, std::move(bufs));
        eccl_result rc = core_->run([&](eccl_comm *c) {
            eccl_request *r = nullptr;
            eccl_result started = begin(c, &r);
            if (started == ECCL_OK) req->attach(r);
            return started;
        });
        if (rc != ECCL_OK) {
            req.reset(); // nothing in flight: just drops the arrays
            raise_eccl(rc, call);
        }
        return req;
    }

    // World size and rank, read inside a GIL-free section (see LayoutError).
    static eccl_result world_rank(eccl_comm *c, int64_t *world, int64_t *rank)
    {
        eccl_result rc = eccl_comm_get_attr(c, ECCL_ATTR_WORLD_SIZE, world);
        if (rc == ECCL_OK && rank) rc = eccl_comm_get_attr(c, ECCL_ATTR_RANK, rank);
        return rc;
    }

    // Runs a layout-checked collective, blocking (req == nullptr: the info
    // comes back in a Blocking) or async (*req set). `check_layout(world,
    // rank, err)` runs with the GIL released, just before the C call made by
    // `blocking` or `async_begin`.
    template <class Check, class B, class A>
    std::unique_ptr<Blocking> layout_call(const char *call, Buffer a, Buffer b, std::unique_ptr<Request> *req,
                                          bool need_rank, Check &&check_layout, B &&blocking, A &&async_begin)
    {
        LayoutError err;
        auto result = std::make_unique<Blocking>();
        std::unique_ptr<Request> r;
        if (req) {
            std::vector<Buffer> bufs;
            bufs.push_back(std::move(a));
            bufs.push_back(std::move(b));
            r = std::make_unique<Request>(core_, call, std::move(bufs));
        }
        eccl_result rc = core_->run([&](eccl_comm *c) {
            int64_t world = 0, rank = 0;
            eccl_result got = world_rank(c, &world, need_rank ? &rank : nullptr);
            if (got != ECCL_OK) return got;
            check_layout(world, rank, err);
            if (err.bad) return ECCL_OK;
            if (!r) return blocking(c, &result->info_);
            eccl_request *rq = nullptr;
            eccl_result started = async_begin(c, &rq);
            if (started == ECCL_OK) r->attach(rq);
            return started;
        });
        if (err.bad) value_error(call, err.msg);
        if (rc != ECCL_OK) {
            r.reset();
            raise_eccl(rc, call, req ? py::object(py::none()) : py::cast(result->info_));
        }
        if (req) *req = std::move(r);
        return result;
    }

    std::unique_ptr<Blocking> gather_like(py::handle send, py::handle recv, uint64_t tag,
                                          std::unique_ptr<Request> *req)
    {
        const char *call = req ? "all_gather_async" : "all_gather";
        // send None: in place, this rank's block already in recvbuf.
        Buffer r = get_buffer(recv, Access::Write, call, "recvbuf");
        Buffer s;
        bool in_place = send.is_none();
        if (!in_place) {
            s = get_buffer(send, Access::Read, call, "sendbuf");
            check_same_dtype(s, r, call, "sendbuf", "recvbuf");
        }
        torch_sync_current_stream(r);
        void *rp = r.ptr, *sp = s.ptr;
        size_t recv_count = r.count, send_count = s.count;
        size_t esize = eccl_dtype_size(r.dtype);
        eccl_dtype dtype = r.dtype;
        size_t count = 0;
        auto check_layout = [&](int64_t world, int64_t rank, LayoutError &err) {
            block_layout(in_place, rp, recv_count, &sp, send_count, esize, world, rank, "recvbuf", "sendbuf", &count,
                         err);
        };
        return layout_call(
            call, std::move(r), std::move(s), req, in_place, check_layout,
            [&](eccl_comm *c, eccl_reduce_info *info) {
                return eccl_allgather(c, sp, rp, count, dtype, tag, info);
            },
            [&](eccl_comm *c, eccl_request **rq) { return eccl_allgather_async(c, sp, rp, count, dtype, tag, rq); });
    }

    std::unique_ptr<Blocking> scatter_like(py::handle send, py::handle recv, eccl_op op, uint64_t tag,
                                           eccl_quant_type quant, std::unique_ptr<Request> *req)
    {
        const char *call = req ? "reduce_scatter_async" : "reduce_scatter";
        // recv None: in place, the result lands in this rank's block of sendbuf.
        bool in_place = recv.is_none();
        Buffer s = get_buffer(send, in_place ? Access::Write : Access::Read, call, in_place ? "buf" : "sendbuf");
        Buffer r;
        if (!in_place) {
            r = get_buffer(recv, Access::Write, call, "recvbuf");
            check_same_dtype(s, r, call, "sendbuf", "recvbuf");
        }
        eccl_allreduce_opts opts = reduce_opts(s, quant);
        void *sp = s.ptr, *rp = r.ptr;
        size_t send_count = s.count, recv_count = r.count;
        size_t esize = eccl_dtype_size(s.dtype);
        eccl_dtype dtype = s.dtype;
        size_t count = 0;
        auto check_layout = [&](int64_t world, int64_t rank, LayoutError &err) {
            block_layout(in_place, sp, send_count, &rp, recv_count, esize, world, rank, in_place ? "buf" : "sendbuf",
                         "recvbuf", &count, err);
        };
        return layout_call(
            call, std::move(s), std::move(r), req, in_place, check_layout,
            [&](eccl_comm *c, eccl_reduce_info *info) {
                return eccl_reduce_scatter_ex(c, sp, rp, count, dtype, op, tag, &opts, info);
            },
            [&](eccl_comm *c, eccl_request **rq) {
                return eccl_reduce_scatter_ex_async(c, sp, rp, count, dtype, op, tag, &opts, rq);
            });
    }

    std::unique_ptr<Blocking> gatherv_like(py::handle send, py::handle recv, const py::object &counts_obj,
                                           const py::object &displs_obj, uint64_t tag,
                                           std::unique_ptr<Request> *req)
    {
        const char *call = req ? "all_gatherv_async" : "all_gatherv";
        std::vector<size_t> counts = size_list(counts_obj, call, "recvcounts");
        std::vector<size_t> displs;
        if (displs_obj.is_none()) {
            size_t at = 0; // blocks back to back
            for (size_t c : counts) {
                displs.push_back(at);
                at += c;
            }
        } else {
            displs = size_list(displs_obj, call, "displs");
            check_count(displs.size(), counts.size(), call, "displs");
        }
        Buffer r = get_buffer(recv, Access::Write, call, "recvbuf");
        Buffer s;
        bool in_place = send.is_none();
        if (!in_place) {
            s = get_buffer(send, Access::Read, call, "sendbuf");
            check_same_dtype(s, r, call, "sendbuf", "recvbuf");
        }
        for (size_t i = 0; i < counts.size(); i++)
            if (displs[i] + counts[i] > r.count)
                value_error(call, "block " + std::to_string(i) + " (" + std::to_string(counts[i]) + " elements at " +
                                      std::to_string(displs[i]) + ") ends past recvbuf's " +
                                      std::to_string(r.count) + " elements");
        torch_sync_current_stream(r);
        void *rp = r.ptr, *sp = s.ptr;
        size_t send_count = s.count, esize = eccl_dtype_size(r.dtype);
        eccl_dtype dtype = r.dtype;
        auto check_layout = [&](int64_t world, int64_t rank, LayoutError &err) {
            if (counts.size() != static_cast<size_t>(world)) {
                err.set("recvcounts has " + std::to_string(counts.size()) + " entries, one per rank (" +
                        std::to_string(world) + ") expected");
                return;
            }
            if (in_place)
                sp = static_cast<char *>(rp) + displs[rank] * esize;
            else if (send_count != counts[rank])
                err.set("sendbuf has " + std::to_string(send_count) + " elements, recvcounts[" +
                        std::to_string(rank) + "] (this rank's) = " + std::to_string(counts[rank]) + " expected");
        };
        return layout_call(
            call, std::move(r), std::move(s), req, true, check_layout,
            [&](eccl_comm *c, eccl_reduce_info *info) {
                return eccl_allgatherv(c, sp, rp, counts.data(), displs.data(), dtype, tag, info);
            },
            [&](eccl_comm *c, eccl_request **rq) {
                return eccl_allgatherv_async(c, sp, rp, counts.data(), displs.data(), dtype, tag, rq);
            });
    }

    std::unique_ptr<Blocking> scatterv_like(py::handle send, py::handle recv, const py::object &counts_obj,
                                            eccl_op op, uint64_t tag, std::unique_ptr<Request> *req)
    {
        const char *call = req ? "reduce_scatterv_async" : "reduce_scatterv";
        std::vector<size_t> counts = size_list(counts_obj, call, "recvcounts");
        size_t total = 0;
        for (size_t c : counts) total += c;
        bool in_place = recv.is_none();
        Buffer s = get_buffer(send, in_place ? Access::Write : Access::Read, call, in_place ? "buf" : "sendbuf");
        Buffer r;
        if (!in_place) {
            r = get_buffer(recv, Access::Write, call, "recvbuf");
            check_same_dtype(s, r, call, "sendbuf", "recvbuf");
        }
        check_count(s.count, total, call, in_place ? "buf (the sum of recvcounts)" : "sendbuf (the sum of recvcounts)");
        torch_sync_current_stream(s);
        void *sp = s.ptr, *rp = r.ptr;
        size_t recv_count = r.count, esize = eccl_dtype_size(s.dtype);
        eccl_dtype dtype = s.dtype;
        auto check_layout = [&](int64_t world, int64_t rank, LayoutError &err) {
            if (counts.size() != static_cast<size_t>(world)) {
                err.set("recvcounts has " + std::to_string(counts.size()) + " entries, one per rank (" +
                        std::to_string(world) + ") expected");
                return;
            }
            if (in_place) {
                size_t before = 0;
                for (int64_t i = 0; i < rank; i++) before += counts[i];
                rp = static_cast<char *>(sp) + before * esize;
            } else if (recv_count != counts[rank]) {
                err.set("recvbuf has " + std::to_string(recv_count) + " elements, recvcounts[" +
                        std::to_string(rank) + "] (this rank's) = " + std::to_string(counts[rank]) + " expected");
            }
        };
        return layout_call(
            call, std::move(s), std::move(r), req, true, check_layout,
            [&](eccl_comm *c, eccl_reduce_info *info) {
                return eccl_reduce_scatterv(c, sp, rp, counts.data(), dtype, op, tag, info);
            },
            [&](eccl_comm *c, eccl_request **rq) {
                return eccl_reduce_scatterv_async(c, sp, rp, counts.data(), dtype, op, tag, rq);
            });
    }

    // send (`sending`) or recv, blocking (req == nullptr) or async: the same
    // buffer checks, one C call or the other.
    std::unique_ptr<Blocking> p2p_like(py::handle buf, bool sending, uint32_t peer, uint64_t tag,
                                       std::unique_ptr<Request> *req)
    {
        const char *call = sending ? (req ? "send_async" : "send") : (req ? "recv_async" : "recv");
        Buffer b = get_buffer(buf, sending ? Access::Read : Access::Write, call, "buf");
        torch_sync_current_stream(b);
        void *p = b.ptr;
        size_t count = b.count;
        eccl_dtype dtype = b.dtype;
        auto result = std::make_unique<Blocking>();
        if (req) {
            *req = start(call, std::move(b), Buffer(), [&](eccl_comm *c, eccl_request **rq) {
                return sending ? eccl_send_async(c, p, count, dtype, peer, tag, rq)
                               : eccl_recv_async(c, p, count, dtype, peer, tag, rq);
            });
            return result;
        }
        eccl_result rc = core_->run([&](eccl_comm *c) {
            return sending ? eccl_send(c, p, count, dtype, peer, tag, &result->info_)
                           : eccl_recv(c, p, count, dtype, peer, tag, &result->info_);
        });
        done(rc, call, result->info_);
        return result;
    }

    std::unique_ptr<Blocking> alltoall_like(py::handle send, py::handle recv, uint64_t tag,
                                            std::unique_ptr<Request> *req)
    {
        const char *call = req ? "all_to_all_async" : "all_to_all";
        Buffer s, r;
        pair(send, recv, call, s, r);
        torch_sync_current_stream(s);
        void *sp = s.ptr, *rp = out(s, r);
        size_t total = s.count, count = 0;
        eccl_dtype dtype = s.dtype;
        auto check_layout = [&](int64_t world, int64_t, LayoutError &err) {
            if (total % world != 0)
                err.set("the buffers' " + std::to_string(total) + " elements are not " + std::to_string(world) +
                        " equal blocks (one per rank of the world)");
            count = total / world;
        };
        return layout_call(
            call, std::move(s), std::move(r), req, false, check_layout,
            [&](eccl_comm *c, eccl_reduce_info *info) { return eccl_alltoall(c, sp, rp, count, dtype, tag, info); },
            [&](eccl_comm *c, eccl_request **rq) { return eccl_alltoall_async(c, sp, rp, count, dtype, tag, rq); });
    }

    std::unique_ptr<Blocking> alltoallv_like(py::handle send, py::handle recv, const py::object &sendcounts_obj,
                                             const py::object &sdispls_obj, const py::object &recvcounts_obj,
                                             const py::object &rdispls_obj, uint64_t tag,
                                             std::unique_ptr<Request> *req)
    {
        const char *call = req ? "all_to_allv_async" : "all_to_allv";
        bool in_place = recv.is_none();
        auto prefix = [](const std::vector<size_t> &counts) {
            std::vector<size_t> d;
            size_t at = 0;
            for (size_t c : counts) {
                d.push_back(at);
                at += c;
            }
            return d;
        };
        std::vector<size_t> rcounts = size_list(recvcounts_obj, call, "recvcounts");
        std::vector<size_t> rdispls = rdispls_obj.is_none() ? prefix(rcounts) : size_list(rdispls_obj, call, "rdispls");
        check_count(rdispls.size(), rcounts.size(), call, "rdispls");
        std::vector<size_t> scounts, sdispls;
        if (in_place) {
            // MPI_IN_PLACE: the send layout is the receive layout.
            if (!sendcounts_obj.is_none() || !sdispls_obj.is_none())
                value_error(call, "in place (recvbuf None): the receive layout is the send layout; pass no "
                                  "sendcounts or sdispls");
        } else {
            if (sendcounts_obj.is_none()) value_error(call, "sendcounts is required out of place");
            scounts = size_list(sendcounts_obj, call, "sendcounts");
            sdispls = sdispls_obj.is_none() ? prefix(scounts) : size_list(sdispls_obj, call, "sdispls");
            check_count(scounts.size(), rcounts.size(), call, "sendcounts");
            check_count(sdispls.size(), rcounts.size(), call, "sdispls");
        }
        // Sizes may differ: the layouts say what is read and written.
        Buffer s = get_buffer(send, in_place ? Access::Write : Access::Read, call, in_place ? "buf" : "sendbuf");
        Buffer r;
        if (!in_place) {
            r = get_buffer(recv, Access::Write, call, "recvbuf");
            check_same_dtype(s, r, call, "sendbuf", "recvbuf");
        }
        for (size_t i = 0; i < rcounts.size(); i++)
            if (rdispls[i] + rcounts[i] > (in_place ? s.count : r.count))
                value_error(call, "receive block " + std::to_string(i) + " ends past the receive buffer");
        for (size_t i = 0; i < scounts.size(); i++)
            if (sdispls[i] + scounts[i] > s.count)
                value_error(call, "send block " + std::to_string(i) + " ends past sendbuf");
        torch_sync_current_stream(s);
        void *sp = s.ptr, *rp = out(s, r);
        eccl_dtype dtype = s.dtype;
        auto check_layout = [&](int64_t world, int64_t, LayoutError &err) {
            if (rcounts.size() != static_cast<size_t>(world))
                err.set("the count lists have " + std::to_string(rcounts.size()) + " entries, one per rank (" +
                        std::to_string(world) + ") expected");
        };
        const size_t *sc = in_place ? nullptr : scounts.data(), *sd = in_place ? nullptr : sdispls.data();
        return layout_call(
            call, std::move(s), std::move(r), req, false, check_layout,
            [&](eccl_comm *c, eccl_reduce_info *info) {
                return eccl_alltoallv(c, sp, sc, sd, rp, rcounts.data(), rdispls.data(), dtype, tag, info);
            },
            [&](eccl_comm *c, eccl_request **rq) {
                return eccl_alltoallv_async(c, sp, sc, sd, rp, rcounts.data(), rdispls.data(), dtype, tag, rq);
            });
    }

    std::shared_ptr<CommCore> core_;
    std::string master_addr_;
    std::string p2p_host_;
    bool connected_ = false;
};

// ---- master and relay ----------------------------------------------------------------

class Master {
public:
    explicit Master(const std::string &listen)
    {
        eccl_result rc;
        {
            py::gil_scoped_release nogil;
            rc = eccl_master_create(listen.c_str(), &m_);
            if (rc == ECCL_OK) rc = eccl_master_run(m_);
            char buf[256];
            if (rc == ECCL_OK) rc = eccl_master_address(m_, buf, sizeof buf);
            if (rc == ECCL_OK) address_ = buf;
        }
        if (rc != ECCL_OK) {
            close();
            raise_eccl(rc, "Master");
        }
    }
    ~Master() { close(); }
    const std::string &address() const { return address_; }
    void trace_all()
    {
        if (m_ == nullptr || stopped_) raise_eccl(ECCL_ERR_CLOSED, "Master.trace_all");
        eccl_result rc = eccl_master_trace_all(m_);
        if (rc != ECCL_OK) raise_eccl(rc, "Master.trace_all");
    }
    std::string metrics()
    {
        if (m_ == nullptr) raise_eccl(ECCL_ERR_CLOSED, "Master.metrics");
        size_t needed = 0;
        eccl_master_metrics(m_, nullptr, 0, &needed);
        std::string text(needed, '\0');
        eccl_result rc = eccl_master_metrics(m_, &text[0], text.size(), &needed);
        if (rc != ECCL_OK) raise_eccl(rc, "Master.metrics");
        text.resize(needed - 1);
        return text;
    }
    bool running() const { return m_ != nullptr && !stopped_; }
    void stop()
    {
        if (m_ == nullptr || stopped_) return;
        eccl_result rc;
        {
            py::gil_scoped_release nogil;
            rc = eccl_master_stop(m_);
        }
        stopped_ = true;
        if (rc != ECCL_OK) raise_eccl(rc, "Master.stop");
    }
    void close()
    {
        if (m_ == nullptr) return;
        py::gil_scoped_release nogil;
        if (!stopped_) eccl_master_stop(m_);
        eccl_master_destroy(m_);
        m_ = nullptr;
    }

private:
    eccl_master *m_ = nullptr;
    bool stopped_ = false;
    std::string address_;
};

class Relay {
public:
    Relay(const std::string &listen, const std::string &parent)
    {
        eccl_result rc;
        {
            py::gil_scoped_release nogil;
            rc = eccl_relay_create(listen.c_str(), parent.c_str(), &r_);
            if (rc == ECCL_OK) rc = eccl_relay_run(r_);
            char buf[256];
            if (rc == ECCL_OK) rc = eccl_relay_address(r_, buf, sizeof buf);
            if (rc == ECCL_OK) address_ = buf;
        }
        if (rc != ECCL_OK) {
            close();
            raise_eccl(rc, "Relay");
        }
    }
    ~Relay() { close(); }
    const std::string &address() const { return address_; }
    void close()
    {
        if (r_ == nullptr) return;
        py::gil_scoped_release nogil;
        eccl_relay_stop(r_);
        eccl_relay_destroy(r_);
        r_ = nullptr;
    }

private:
    eccl_relay *r_ = nullptr;
    std::string address_;
};

std::string reduce_info_repr(const eccl_reduce_info &i)
{
    return "ReduceInfo(world_size=" + std::to_string(i.world_size) + ", algorithm='" +
           eccl_algorithm_name(i.algorithm) + "', tx_bytes=" + std::to_string(i.tx_bytes) +
           ", rx_bytes=" + std::to_string(i.rx_bytes) + ")";
}

} // namespace

PYBIND11_MODULE(_eccl, m)
{
    m.doc() = "libeccl's C API (include/eccl.h) for Python; use the `eccl` package, not this module";

    m.attr("VERSION") = py::make_tuple(ECCL_VERSION_MAJOR, ECCL_VERSION_MINOR, ECCL_VERSION_PATCH);

    m.def("_set_error_factory", [](py::object f) {
        Py_XDECREF(g_make_error);
        g_make_error = f.release().ptr(); // kept to the end of the process
    });
    m.def("strerror", [](int code) { return std::string(eccl_strerror(static_cast<eccl_result>(code))); },
          py::arg("code"), "eccl_strerror: the C library's description of an eccl_result code");

    py::enum_<eccl_result>(m, "Result", "eccl_result: ECCL_OK and the ECCL_ERR_* codes")
        .value("OK", ECCL_OK)
        .value("INVALID_ARG", ECCL_ERR_INVALID_ARG)
        .value("NO_MEMORY", ECCL_ERR_NO_MEMORY)
        .value("SYSTEM", ECCL_ERR_SYSTEM)
        .value("CONNECT", ECCL_ERR_CONNECT)
        .value("TIMEOUT", ECCL_ERR_TIMEOUT)
        .value("PEER_LOST", ECCL_ERR_PEER_LOST)
        .value("TOO_FEW_PEERS", ECCL_ERR_TOO_FEW_PEERS)
        .value("PROTOCOL", ECCL_ERR_PROTOCOL)
        .value("KICKED", ECCL_ERR_KICKED)
        .value("MASTER_LOST", ECCL_ERR_MASTER_LOST)
        .value("BUSY", ECCL_ERR_BUSY)
        .value("NOT_CONNECTED", ECCL_ERR_NOT_CONNECTED)
        .value("AGAIN", ECCL_ERR_AGAIN)
        .value("CLOSED", ECCL_ERR_CLOSED)
        .value("UNSUPPORTED", ECCL_ERR_UNSUPPORTED)
        .value("DEVICE", ECCL_ERR_DEVICE)
        .value("AUTH", ECCL_ERR_AUTH);

    py::enum_<eccl_dtype>(m, "Dtype", "eccl_dtype")
        .value("I8", ECCL_I8).value("U8", ECCL_U8).value("I16", ECCL_I16).value("U16", ECCL_U16)
        .value("I32", ECCL_I32).value("U32", ECCL_U32).value("I64", ECCL_I64).value("U64", ECCL_U64)
        .value("F16", ECCL_F16).value("BF16", ECCL_BF16).value("F32", ECCL_F32).value("F64", ECCL_F64);
    m.def("dtype_size", [](eccl_dtype d) { return eccl_dtype_size(d); }, py::arg("dtype"));
    m.def("dtype_name", [](eccl_dtype d) { return std::string(eccl_dtype_name(d)); }, py::arg("dtype"));
    // The dtype eccl would send a buffer as (TypeError if none): lets
    // callers and tests check a buffer without making a call.
    m.def(
        "buffer_dtype",
        [](py::handle obj) {
            Buffer b = get_buffer(obj, Access::Read, "buffer_dtype", "the buffer");
            return b.dtype;
        },
        py::arg("buf"));

    py::enum_<eccl_op>(m, "Op", "eccl_op: the reduction")
        .value("SUM", ECCL_SUM).value("AVG", ECCL_AVG).value("PROD", ECCL_PROD)
        .value("MIN", ECCL_MIN).value("MAX", ECCL_MAX)
        .export_values();

    py::enum_<eccl_quant_type>(m, "Quant", "eccl_quant_type: all-reduce and reduce-scatter quantisation")
        .value("NONE", ECCL_QUANT_NONE)
        .value("MINMAX_U8", ECCL_QUANT_MINMAX_U8)
        .value("AFFINE_U8", ECCL_QUANT_AFFINE_U8);

    py::enum_<eccl_sync_strategy>(m, "SyncStrategy", "eccl_sync_strategy")
        .value("ENFORCE_POPULAR", ECCL_SYNC_ENFORCE_POPULAR)
        .value("SEND_ONLY", ECCL_SYNC_SEND_ONLY)
        .value("RECEIVE_ONLY", ECCL_SYNC_RECEIVE_ONLY);

    py::enum_<eccl_hash_type>(m, "HashType", "eccl_hash_type")
        .value("SIMPLE", ECCL_HASH_SIMPLE)
        .value("CRC32C", ECCL_HASH_CRC32C);

    py::enum_<eccl_attr>(m, "Attr", "eccl_attr")
        .value("RANK", ECCL_ATTR_RANK)
        .value("WORLD_SIZE", ECCL_ATTR_WORLD_SIZE)
        .value("PEER_ID", ECCL_ATTR_PEER_ID)
        .value("EPOCH", ECCL_ATTR_EPOCH)
        .value("P2P_POOL", ECCL_ATTR_P2P_POOL)
        .value("RING_LINKS", ECCL_ATTR_RING_LINKS)
        .value("HOST_RANKS", ECCL_ATTR_HOST_RANKS)
        .value("SLOW_PEER", ECCL_ATTR_SLOW_PEER)
        .value("SLOW_LINK_FROM", ECCL_ATTR_SLOW_LINK_FROM)
        .value("SLOW_LINK_TO", ECCL_ATTR_SLOW_LINK_TO);

    py::enum_<eccl_algorithm>(m, "Algorithm", "eccl_algorithm: how a collective ran")
        .value("RING", ECCL_ALGO_RING).value("TREE", ECCL_ALGO_TREE).value("CHAIN", ECCL_ALGO_CHAIN)
        .value("RECURSIVE", ECCL_ALGO_RECURSIVE).value("BINOMIAL", ECCL_ALGO_BINOMIAL)
        .value("PAIRWISE", ECCL_ALGO_PAIRWISE).value("DIRECT", ECCL_ALGO_DIRECT)
        .value("BRUCK", ECCL_ALGO_BRUCK).value("HIER", ECCL_ALGO_HIER);

    py::class_<eccl_reduce_info>(m, "ReduceInfo", "What one collective call did (eccl_reduce_info)")
        .def_readonly("world_size", &eccl_reduce_info::world_size, "peers that took part")
        .def_readonly("algorithm", &eccl_reduce_info::algorithm, "an Algorithm value")
        .def_property_readonly("algorithm_name",
                               [](const eccl_reduce_info &i) { return std::string(eccl_algorithm_name(i.algorithm)); })
        .def_readonly("tx_bytes", &eccl_reduce_info::tx_bytes, "payload bytes this peer sent")
        .def_readonly("rx_bytes", &eccl_reduce_info::rx_bytes, "payload bytes this peer received")
        .def("__repr__", &reduce_info_repr);

    py::class_<eccl_sync_info>(m, "SyncInfo", "What one shared-state sync did (eccl_sync_info)")
        .def_readonly("tx_bytes", &eccl_sync_info::tx_bytes)
        .def_readonly("rx_bytes", &eccl_sync_info::rx_bytes)
        .def_readonly("revision", &eccl_sync_info::revision)
        .def_readonly("keys_fetched", &eccl_sync_info::keys_fetched)
        .def_readonly("keys_served", &eccl_sync_info::keys_served)
        .def("__repr__", [](const eccl_sync_info &i) {
            return "SyncInfo(revision=" + std::to_string(i.revision) + ", keys_fetched=" +
                   std::to_string(i.keys_fetched) + ", keys_served=" + std::to_string(i.keys_served) +
                   ", tx_bytes=" + std::to_string(i.tx_bytes) + ", rx_bytes=" + std::to_string(i.rx_bytes) + ")";
        });

    py::class_<eccl_topo_info>(m, "TopoInfo", "What one topology optimisation did (eccl_topo_info)")
        .def_property_readonly("changed", [](const eccl_topo_info &i) { return i.changed != 0; })
        .def_property_readonly("exact", [](const eccl_topo_info &i) { return i.exact != 0; })
        .def_property_readonly("moonshot", [](const eccl_topo_info &i) { return i.moonshot != 0; })
        .def_readonly("pairs_measured", &eccl_topo_info::pairs_measured)
        .def_readonly("unmeasured_links", &eccl_topo_info::unmeasured_links)
        .def_readonly("probes_sent", &eccl_topo_info::probes_sent)
        .def_readonly("probes_failed", &eccl_topo_info::probes_failed)
        .def_readonly("probe_bytes", &eccl_topo_info::probe_bytes)
        .def_readonly("old_bottleneck_bps", &eccl_topo_info::old_bottleneck_bps)
        .def_readonly("new_bottleneck_bps", &eccl_topo_info::new_bottleneck_bps)
        .def("__repr__", [](const eccl_topo_info &i) {
            return "TopoInfo(changed=" + std::string(i.changed ? "True" : "False") +
                   ", pairs_measured=" + std::to_string(i.pairs_measured) +
                   ", unmeasured_links=" + std::to_string(i.unmeasured_links) +
                   ", probes_sent=" + std::to_string(i.probes_sent) + ")";
        });

    py::class_<Request>(m, "Request", "An async collective in flight: wait() or test() it")
        .def("wait", &Request::wait,
             "Blocks (GIL released) until the op ended; returns its ReduceInfo or raises its eccl.Error")
        .def("test", &Request::test,
             "True once the op ended (raising its eccl.Error if it failed), False while it runs; never blocks")
        .def_property_readonly("done", &Request::done)
        .def_property_readonly("call", [](const Request &r) { return std::string(r.call()); })
        .def("__repr__", [](Request &r) {
            return std::string("<eccl.Request ") + r.call() + (r.done() ? " done>" : " in flight>");
        });

    const uint64_t no_tag = 0;
    const auto sum = ECCL_SUM;
    const auto no_quant = ECCL_QUANT_NONE;
    py::class_<Comm>(m, "Comm", "An eccl communicator (eccl_comm); see eccl.Comm")
        .def(py::init<const std::string &, const py::object &, const py::object &, const py::object &,
                      const py::object &, const py::object &, const py::object &>(),
             py::arg("master_addr"), py::kw_only(), py::arg("p2p_host") = py::none(),
             py::arg("peer_group") = py::none(), py::arg("p2p_pool_size") = py::none(),
             py::arg("connect_timeout_ms") = py::none(), py::arg("op_timeout_ms") = py::none(),
             py::arg("peer_timeout_ms") = py::none())
        .def("connect", &Comm::connect, "eccl_comm_connect: registers with the master; returns once the accepted peers voted this peer in")
        .def("close", &Comm::close, "eccl_comm_destroy (idempotent): leaves an elastic run; ops in flight fail with eccl.Closed")
        .def_property_readonly("closed", &Comm::closed)
        .def_property_readonly("connected", &Comm::connected)
        .def_property_readonly("master_addr", &Comm::master_addr)
        .def("leave", &Comm::leave, "eccl_comm_leave: the vote to end the run together; later calls raise eccl.Closed")
        .def("peers_pending", &Comm::peers_pending, "eccl_comm_peers_pending: a vote of every accepted peer; the number waiting for admission")
        .def("update_topology", &Comm::update_topology, "eccl_comm_update_topology: admits every pending peer (every accepted peer calls it)")
        .def("get_attr", &Comm::get_attr, "eccl_comm_get_attr: an eccl.Attr value", py::arg("attr"))
        .def("trace_dump", &Comm::trace_dump, "eccl_comm_trace_dump: writes this rank's collective trace (eccl-trace-*.txt in ECCL_TRACE_DIR, else the current directory; docs/trace.md)", py::arg("why") = "asked")
        .def("all_reduce", &Comm::all_reduce, "eccl_allreduce_ex: recvbuf None means in place; returns a ReduceInfo", py::arg("sendbuf"), py::arg("recvbuf") = py::none(), py::kw_only(),
             py::arg("op") = sum, py::arg("tag") = no_tag, py::arg("quant") = no_quant)
        .def("all_reduce_async", &Comm::all_reduce_async, "eccl_allreduce_ex_async: returns a Request", py::arg("sendbuf"), py::arg("recvbuf") = py::none(),
             py::kw_only(), py::arg("op") = sum, py::arg("tag") = no_tag, py::arg("quant") = no_quant)
        .def("all_reduce_multiple_with_retry", &Comm::all_reduce_multiple_with_retry, "eccl_allreduce_multiple_with_retry: each item a buffer (in place) or a (send, recv) pair; returns [ReduceInfo]", py::arg("bufs"),
             py::kw_only(), py::arg("op") = sum, py::arg("tags") = py::none(), py::arg("max_in_flight") = 1u,
             py::arg("quant") = no_quant)
        .def("all_gather", &Comm::all_gather, "eccl_allgather: recvbuf gets world x len(sendbuf) elements; sendbuf None: in place", py::arg("sendbuf"), py::arg("recvbuf"), py::kw_only(),
             py::arg("tag") = no_tag)
        .def("all_gather_async", &Comm::all_gather_async, "eccl_allgather_async: returns a Request", py::arg("sendbuf"), py::arg("recvbuf"), py::kw_only(),
             py::arg("tag") = no_tag)
        .def("reduce_scatter", &Comm::reduce_scatter, "eccl_reduce_scatter_ex: sendbuf holds world blocks of len(recvbuf); recvbuf None: in place", py::arg("sendbuf"), py::arg("recvbuf") = py::none(),
             py::kw_only(), py::arg("op") = sum, py::arg("tag") = no_tag, py::arg("quant") = no_quant)
        .def("reduce_scatter_async", &Comm::reduce_scatter_async, "eccl_reduce_scatter_ex_async: returns a Request", py::arg("sendbuf"),
             py::arg("recvbuf") = py::none(), py::kw_only(), py::arg("op") = sum, py::arg("tag") = no_tag,
             py::arg("quant") = no_quant)
        .def("all_gatherv", &Comm::all_gatherv, "eccl_allgatherv: recvcounts (and displs, default back to back) one per rank; sendbuf None: in place", py::arg("sendbuf"), py::arg("recvbuf"), py::arg("recvcounts"),
             py::arg("displs") = py::none(), py::kw_only(), py::arg("tag") = no_tag)
        .def("all_gatherv_async", &Comm::all_gatherv_async, "eccl_allgatherv_async: returns a Request", py::arg("sendbuf"), py::arg("recvbuf"),
             py::arg("recvcounts"), py::arg("displs") = py::none(), py::kw_only(), py::arg("tag") = no_tag)
        .def("reduce_scatterv", &Comm::reduce_scatterv, "eccl_reduce_scatterv: sendbuf holds the blocks back to back; recvbuf None: in place", py::arg("sendbuf"), py::arg("recvbuf"),
             py::arg("recvcounts"), py::kw_only(), py::arg("op") = sum, py::arg("tag") = no_tag)
        .def("reduce_scatterv_async", &Comm::reduce_scatterv_async, "eccl_reduce_scatterv_async: returns a Request", py::arg("sendbuf"), py::arg("recvbuf"),
             py::arg("recvcounts"), py::kw_only(), py::arg("op") = sum, py::arg("tag") = no_tag)
        .def("broadcast", &Comm::broadcast, "eccl_broadcast: root's sendbuf lands in every recvbuf (None: in place)", py::arg("sendbuf"), py::arg("recvbuf") = py::none(), py::kw_only(),
             py::arg("root") = 0u, py::arg("tag") = no_tag)
        .def("broadcast_async", &Comm::broadcast_async, "eccl_broadcast_async: returns a Request", py::arg("sendbuf"), py::arg("recvbuf") = py::none(),
             py::kw_only(), py::arg("root") = 0u, py::arg("tag") = no_tag)
        .def("reduce", &Comm::reduce, "eccl_reduce: the reduction lands in root's recvbuf (None: in place)", py::arg("sendbuf"), py::arg("recvbuf") = py::none(), py::kw_only(),
             py::arg("root") = 0u, py::arg("op") = sum, py::arg("tag") = no_tag)
        .def("reduce_async", &Comm::reduce_async, "eccl_reduce_async: returns a Request", py::arg("sendbuf"), py::arg("recvbuf") = py::none(),
             py::kw_only(), py::arg("root") = 0u, py::arg("op") = sum, py::arg("tag") = no_tag)
        .def("all_to_all", &Comm::all_to_all, "eccl_alltoall: world blocks each way; recvbuf None: in place", py::arg("sendbuf"), py::arg("recvbuf") = py::none(), py::kw_only(),
             py::arg("tag") = no_tag)
        .def("all_to_all_async", &Comm::all_to_all_async, "eccl_alltoall_async: returns a Request", py::arg("sendbuf"), py::arg("recvbuf") = py::none(),
             py::kw_only(), py::arg("tag") = no_tag)
        .def("all_to_allv", &Comm::all_to_allv, "eccl_alltoallv: MPI's layouts in elements; recvbuf None: in place (no send layout)", py::arg("sendbuf"), py::arg("recvbuf"), py::kw_only(),
             py::arg("sendcounts") = py::none(), py::arg("sdispls") = py::none(), py::arg("recvcounts"),
             py::arg("rdispls") = py::none(), py::arg("tag") = no_tag)
        .def("all_to_allv_async", &Comm::all_to_allv_async, "eccl_alltoallv_async: returns a Request", py::arg("sendbuf"), py::arg("recvbuf"), py::kw_only(),
             py::arg("sendcounts") = py::none(), py::arg("sdispls") = py::none(), py::arg("recvcounts"),
             py::arg("rdispls") = py::none(), py::arg("tag") = no_tag)
        .def("send", &Comm::send, "eccl_send: to rank `peer`; returns once the receiver acknowledged", py::arg("buf"), py::arg("peer"), py::kw_only(), py::arg("tag") = no_tag)
        .def("send_async", &Comm::send_async, "eccl_send_async: returns a Request", py::arg("buf"), py::arg("peer"), py::kw_only(),
             py::arg("tag") = no_tag)
        .def("recv", &Comm::recv, "eccl_recv: from rank `peer`, into buf", py::arg("buf"), py::arg("peer"), py::kw_only(), py::arg("tag") = no_tag)
        .def("recv_async", &Comm::recv_async, "eccl_recv_async: returns a Request", py::arg("buf"), py::arg("peer"), py::kw_only(),
             py::arg("tag") = no_tag)
        .def("barrier", &Comm::barrier, "eccl_barrier", py::kw_only(), py::arg("tag") = no_tag)
        .def("barrier_async", &Comm::barrier_async, "eccl_barrier_async: returns a Request", py::kw_only(), py::arg("tag") = no_tag)
        .def("_sync_shared_state", &Comm::sync_shared_state, py::arg("keys"), py::arg("bufs"), py::arg("unvoted"),
             py::arg("revision"), py::arg("strategy"), py::arg("hash"))
        .def("optimize_topology", &Comm::optimize_topology, "eccl_comm_optimize_topology: every accepted peer calls it; returns a TopoInfo", py::kw_only(), py::arg("probe_ms") = py::none(),
             py::arg("probe_conns") = py::none(), py::arg("max_rounds") = py::none());

    py::class_<Master>(m, "Master", "An eccl master (eccl_master), serving from its own thread")
        .def(py::init<const std::string &>(), py::arg("listen") = "127.0.0.1:0")
        .def_property_readonly("address", &Master::address, "the address actually bound, HOST:PORT")
        .def_property_readonly("running", &Master::running)
        .def("stop", &Master::stop, "stops serving; connected peers see eccl.MasterLost")
        .def("trace_all", &Master::trace_all, "eccl_master_trace_all: every member writes its collective trace (ECCL_TRACE_DIR; docs/trace.md)")
        .def("metrics", &Master::metrics, "eccl_master_metrics: the master's metrics, Prometheus text format")
        .def("close", &Master::close, "stops (if running) and frees the master")
        .def("__enter__", [](py::object self) { return self; })
        .def("__exit__", [](Master &master, py::args) {
            master.close();
            return false;
        })
        .def("__repr__", [](const Master &master) {
            return "<eccl.Master " + master.address() + (master.running() ? ">" : " stopped>");
        });

    py::class_<Relay>(m, "Relay", "A relay of the coordinator's tree (eccl_relay)")
        .def(py::init<const std::string &, const std::string &>(), py::arg("listen"), py::arg("parent"))
        .def_property_readonly("address", &Relay::address)
        .def("close", &Relay::close)
        .def("__enter__", [](py::object self) { return self; })
        .def("__exit__", [](Relay &r, py::args) {
            r.close();
            return false;
        });
}
