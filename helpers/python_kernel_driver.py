# The persistent Python of a sandbox: IPython's InteractiveShell (from Debian's
# python3-ipykernel and its python3-ipython), driven over a pipe by sandboxd.
#
# sandboxd starts this as a long-lived process in the sandbox, as the agent, with the
# same confinement as any command. It is not a kernel of its own: IPython runs the
# cells (the last expression's value, display(), matplotlib's inline backend,
# tracebacks); this file only frames requests and results.
#
# Protocol: frames of a 4-byte big-endian length and a UTF-8 JSON object.
#   server -> driver (stdin):   {"op": "execute", "id": N, "code": str, "limit": bytes,
#                                "stream": bool, "env": {name: value}}
#                               {"op": "interrupt", "id": N}
#                               {"op": "tool_results", "id": N, "results": [...]}  (below)
#   driver -> server (fd 1 at start, moved to a private descriptor):
#                               {"op": "ready"}
#                               {"op": "event", "id": N, "event": {...}}   (streamed calls)
#                               {"op": "done", "id": N, "status": "ok"|"error"|"interrupted",
#                                "execution_count": n, "stdout": str, "stderr": str,
#                                "outputs": [...]}
#                               {"op": "tool_calls", "id": N, "calls": [...]}  (below)
# A streamed call sends what happens as it happens, in order: {"type": "start",
# "execution_count": n}, {"type": "stdout"|"stderr", "text": str} (bursts gathered into
# one event), the outputs (as in "outputs" below); its "done" then carries no text or
# outputs, as they went out already. Otherwise everything comes in "done", with the
# traceback also added to stderr as a terminal would show it.
# `env` is set in os.environ for the cell only. The working directory is the argument
# after the script (`python3 -c DRIVER DIR`), when given.
# An execute frame may also carry "tools": [name, ...] (programmatic tool calling, see
# the section "Client tools as async functions").
# The code that runs here is the agent's and may write anything to any descriptor,
# the protocol's included: the server trusts nothing it reads (sizes are bounded, a
# frame that does not parse ends this kernel, never the server).
import codecs
import json
import os
import select
import signal
import struct
import sys
import threading
import time

# IPython first: if it is missing, the error goes to the original stderr, which the
# server reads when the start fails.
from IPython.core.displayhook import DisplayHook
from IPython.core.displaypub import DisplayPublisher
from IPython.core.interactiveshell import InteractiveShell

# The working directory first, while stderr is still the one the server reads when the
# start fails.
if len(sys.argv) > 1 and sys.argv[1]:
    try:
        os.chdir(sys.argv[1])
    except OSError as e:
        sys.stderr.write("cannot use %s as the working directory: %s\n" % (sys.argv[1], e.strerror))
        sys.stderr.flush()
        os._exit(1)

PROTOCOL_OUT = os.dup(1)
os.set_inheritable(PROTOCOL_OUT, False)
PROTOCOL_IN = os.dup(0)
os.set_inheritable(PROTOCOL_IN, False)

# What processes started by the code (os.system, subprocess) and C extensions write to
# descriptors 1 and 2 goes into the call's stdout and stderr, as it would in a terminal:
# each is a pipe read here. Descriptor 0 becomes /dev/null (requests are not for them).
_null = os.open("/dev/null", os.O_RDONLY)
os.dup2(_null, 0)
os.close(_null)
_fd_pipes = {}
for _fd in (1, 2):
    _r, _w = os.pipe()
    os.dup2(_w, _fd)
    os.close(_w)
    os.set_blocking(_r, False)
    _fd_pipes[_fd] = _r

# Held to add to the capture and to send a frame: a streamed call's events leave in the
# order they happened, and none after its "done".
_lock = threading.RLock()
TRUNCATED = "...[truncated]"


class Capture:
    """One call's stdout and stderr, each kept up to `limit` bytes. A streamed call
    (`call_id` set) keeps nothing: what is accepted waits in `pending` for the streamer."""

    def __init__(self, limit, call_id=None):
        self.limit = limit
        self.call_id = call_id
        self.parts = {1: [], 2: []}
        self.sizes = {1: 0, 2: 0}
        self.truncated = {1: False, 2: False}
        self.pending = {1: [], 2: []}
        # A character split between two writes is decoded whole in the later event.
        self.decoders = {fd: codecs.getincrementaldecoder("utf-8")("replace") for fd in (1, 2)}

    def add(self, fd, data):
        room = self.limit - self.sizes[fd]
        cut = len(data) > room
        if cut:
            data = data[:max(room, 0)]
        if data:
            self.sizes[fd] += len(data)
            (self.pending if self.call_id is not None else self.parts)[fd].append(data)
        if cut and not self.truncated[fd]:
            self.truncated[fd] = True
            if self.call_id is not None:
                self.pending[fd].append(TRUNCATED.encode())
        if self.call_id is not None and (data or cut):
            _stream_wakeup.set()

    def flush(self):
        # Called with _lock held: sends what waits as one event per stream.
        if self.call_id is None:
            return
        for fd, name in ((1, "stdout"), (2, "stderr")):
            if not self.pending[fd]:
                continue
            text = self.decoders[fd].decode(b"".join(self.pending[fd]))
            self.pending[fd] = []
            if text:
                send({"op": "event", "id": self.call_id, "event": {"type": name, "text": text}})

    def text(self, fd):
        if self.call_id is not None:
            return ""  # it went out as events
        out = b"".join(self.parts[fd]).decode("utf-8", "replace")
        return out + TRUNCATED if self.truncated[fd] else out


_stream_wakeup = threading.Event()


_capture = Capture(1 << 20)


def _drain(fd):
    # Called with _lock held: what sits in the pipe now belongs to the current call.
    while True:
        try:
            data = os.read(_fd_pipes[fd], 65536)
        except BlockingIOError:
            return
        except OSError:
            return
        if not data:
            return
        _capture.add(fd, data)


def _pump():
    fds = list(_fd_pipes.values())
    back = {v: k for k, v in _fd_pipes.items()}
    while True:
        try:
            ready, _, _ = select.select(fds, [], [])
        except OSError:
            return
        with _lock:
            for r in ready:
                _drain(back[r])


def _streamer():
    # A burst of writes (a loop of prints) goes out as one event a few ms later, not
    # as one frame per write.
    while True:
        _stream_wakeup.wait()
        time.sleep(0.005)
        _stream_wakeup.clear()
        with _lock:
            _capture.flush()


class CapturedStream:
    """sys.stdout / sys.stderr: text into the current call's capture."""

    encoding = "utf-8"
    errors = "replace"

    def __init__(self, fd):
        self.fd = fd

    def write(self, text):
        if not isinstance(text, str):
            raise TypeError("write() argument must be str, not %s" % type(text).__name__)
        with _lock:
            _capture.add(self.fd, text.encode("utf-8", "replace"))
        return len(text)

    def writelines(self, lines):
        for line in lines:
            self.write(line)

    def flush(self):
        pass

    def isatty(self):
        return False

    def fileno(self):
        return self.fd

    def readable(self):
        return False

    def writable(self):
        return True


def send(message):
    data = json.dumps(message, ensure_ascii=False, default=str).encode("utf-8", "replace")
    frame = struct.pack(">I", len(data)) + data
    view = memoryview(frame)
    # An interrupt (SIGINT, taken by the main thread) waits until the frame is out: a
    # frame cut in half would end the kernel.
    main = threading.current_thread() is threading.main_thread()
    with _lock:
        if main:
            signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        try:
            while view:
                n = os.write(PROTOCOL_OUT, view)
                view = view[n:]
        finally:
            if main:
                signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


def output(message):
    """One output of the running cell: streamed at once (after the text before it), or
    kept for its "done"."""
    with _lock:
        if _capture.call_id is None:
            _outputs.append(message)
            return
        _drain(1)  # what processes wrote before it came first
        _drain(2)
        _capture.flush()
        send({"op": "event", "id": _capture.call_id, "event": message})


def read_exactly(n):
    chunks = []
    while n > 0:
        data = os.read(PROTOCOL_IN, n)
        if not data:
            return None
        chunks.append(data)
        n -= len(data)
    return b"".join(chunks)


def receive():
    header = read_exactly(4)
    if header is None:
        return None
    (length,) = struct.unpack(">I", header)
    body = read_exactly(length)
    return None if body is None else json.loads(body.decode("utf-8"))


# The call running now (its id), read by the request thread to route interrupts.
_running = {"id": None}
_outputs = []


def _jsonable(bundle):
    out = {}
    for mime, value in (bundle or {}).items():
        if isinstance(value, bytes):
            import base64

            value = base64.b64encode(value).decode("ascii")
        elif not isinstance(value, (str, int, float, bool, list, dict)) and value is not None:
            value = str(value)
        out[mime] = value
    return out




class ResultHook(DisplayHook):
    """The last expression's value: an execute_result with its MIME bundle."""

    def start_displayhook(self):
        pass

    def write_output_prompt(self):
        pass

    def write_format_data(self, format_dict, md_dict=None):
        output({"type": "execute_result", "data": _jsonable(format_dict)})

    def finish_displayhook(self):
        pass


class Publisher(DisplayPublisher):
    """display() and matplotlib's inline figures: display_data with the MIME bundle."""

    def publish(self, data, metadata=None, source=None, *, transient=None, update=False, **kwargs):
        output({"type": "display_data", "data": _jsonable(data)})

    def clear_output(self, wait=False):
        pass


class Shell(InteractiveShell):
    displayhook_class = ResultHook
    display_pub_class = Publisher

    def _showtraceback(self, etype, evalue, stb):
        traceback = list(stb)
        with _lock:
            streamed = _capture.call_id is not None
            output({"type": "error", "ename": getattr(etype, "__name__", str(etype)),
                    "evalue": str(evalue), "traceback": traceback})
            if not streamed:
                _capture.add(2, ("\n".join(traceback) + "\n").encode("utf-8", "replace"))

    def ask_exit(self):
        pass  # `exit` in a cell does not end the kernel


# --- Client tools as async functions (programmatic tool calling) --------------------
# While a cell whose execute frame named "tools" runs, each name is an async function in
# the user namespace: `await name(field=value, ...)` (or one dict) sends
#   {"op": "tool_calls", "id": N, "calls": [{"call": "c1", "name": str, "input": {...}}]}
# and waits. The calls made before the event loop next runs its queue go in one frame
# (asyncio.gather's come together). The server answers once its client has:
#   {"op": "tool_results", "id": N, "results": [{"call": "c1", "content": str, "is_error": bool}]}
# A result is the call's return value (the text); an error raises ToolCallError.


class ToolCallError(Exception):
    """A client tool called from code failed (its tool_result had is_error), or timed out."""


_tools = {"cell": None, "names": (), "next": 0, "waiters": {}, "batch": [], "flushing": False}
_tools_lock = threading.Lock()


def _flush_tool_calls():
    with _tools_lock:
        batch, _tools["batch"] = _tools["batch"], []
        _tools["flushing"] = False
        cell = _tools["cell"]
    if batch:
        send({"op": "tool_calls", "id": cell, "calls": batch})


def _tool_function(name):
    async def call(*args, **kwargs):
        if args:
            if len(args) != 1 or kwargs or not isinstance(args[0], dict):
                raise TypeError("%s() takes the tool's input as keyword arguments or one dict" % name)
            tool_input = dict(args[0])
        else:
            tool_input = kwargs
        import asyncio

        loop = asyncio.get_running_loop()
        future = loop.create_future()
        with _tools_lock:
            if _tools["cell"] is None or name not in _tools["names"]:
                raise ToolCallError("%s is not callable here: only code_execution calls that offer it "
                                    "can call it" % name)
            _tools["next"] += 1
            call_id = "c%d" % _tools["next"]
            _tools["waiters"][call_id] = (loop, future)
            _tools["batch"].append({"call": call_id, "name": name, "input": tool_input})
            schedule = not _tools["flushing"]
            _tools["flushing"] = True
        if schedule:
            loop.call_soon(_flush_tool_calls)
        try:
            return await future
        finally:
            with _tools_lock:
                _tools["waiters"].pop(call_id, None)

    call.__name__ = call.__qualname__ = name
    call.__doc__ = "The client tool %s (awaitable): input as keyword arguments; returns its result." % name
    return call


def _settle(future, result):
    if future.done():
        return
    content = result.get("content")
    text = content if isinstance(content, str) else json.dumps(content, ensure_ascii=False)
    if result.get("is_error"):
        future.set_exception(ToolCallError(text))
    else:
        future.set_result(text)


def _answer_tool_calls(message):
    """The reader thread's side: the server's answers wake the waiting calls."""
    results = message.get("results")
    if message.get("id") != _tools["cell"] or not isinstance(results, list):
        return
    for result in results:
        if not isinstance(result, dict):
            continue
        with _tools_lock:
            waiter = _tools["waiters"].get(result.get("call"))
        if waiter:
            loop, future = waiter
            loop.call_soon_threadsafe(_settle, future, result)


def _offer_tools(shell, call_id, names):
    """Before a cell: its tools become functions (a name that is not offered raises)."""
    names = tuple(n for n in (names or ()) if isinstance(n, str) and n.isidentifier())
    with _tools_lock:
        _tools["cell"] = call_id
        _tools["names"] = names
        _tools["batch"] = []
        _tools["flushing"] = False
    if names:
        shell.user_ns["ToolCallError"] = ToolCallError
    for name in names:
        shell.user_ns[name] = _tool_function(name)


def _withdraw_tools():
    with _tools_lock:
        _tools["cell"] = None
        _tools["names"] = ()
        _tools["waiters"].clear()


def main():
    global _capture
    # Matplotlib draws into PNGs shown after each cell (its inline backend), whenever
    # the code imports it; nothing is imported before the code asks.
    os.environ.setdefault("MPLBACKEND", "module://matplotlib_inline.backend_inline")
    os.environ.setdefault("MPLCONFIGDIR", "/tmp/matplotlib")

    sys.stdout = CapturedStream(1)
    sys.stderr = CapturedStream(2)
    shell = Shell.instance(colors="NoColor", autoindent=False, history_length=0)
    shell.history_manager.enabled = False
    threading.Thread(target=_pump, daemon=True).start()
    threading.Thread(target=_streamer, daemon=True).start()

    requests = []
    have_request = threading.Condition()

    def read_requests():
        while True:
            try:
                message = receive()
            except Exception:
                message = None
            if message is None:
                os._exit(0)  # the server closed the channel: the kernel ends
            if message.get("op") == "tool_results":
                _answer_tool_calls(message)
                continue
            if message.get("op") == "interrupt":
                if _running["id"] is not None and _running["id"] == message.get("id"):
                    signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)
                continue
            with have_request:
                requests.append(message)
                have_request.notify()

    threading.Thread(target=read_requests, daemon=True).start()
    send({"op": "ready"})
    while True:
        # An interrupt that arrives just after its cell ended lands here: ignored.
        try:
            serve_one(shell, requests, have_request)
        except KeyboardInterrupt:
            pass


def serve_one(shell, requests, have_request):
    global _capture
    with have_request:
        while not requests:
            have_request.wait()
        message = requests.pop(0)
    if message.get("op") != "execute":
        return
    call_id = message.get("id")
    limit = message.get("limit")
    streamed = message.get("stream") is True
    execution_count = shell.execution_count
    with _lock:
        # What the previous call's processes write after it ended is not this one's.
        _drain(1)
        _drain(2)
        _capture = Capture(limit if isinstance(limit, int) and limit > 0 else 1 << 20,
                           call_id if streamed else None)
        if streamed:
            send({"op": "event", "id": call_id,
                  "event": {"type": "start", "execution_count": execution_count}})
    del _outputs[:]
    env = message.get("env")
    saved_env = {}
    if isinstance(env, dict):
        for name, value in env.items():
            if isinstance(name, str) and isinstance(value, str):
                saved_env[name] = os.environ.get(name)
                os.environ[name] = value
    status = "ok"
    _offer_tools(shell, call_id, message.get("tools"))
    _running["id"] = call_id
    try:
        result = shell.run_cell(str(message.get("code", "")), store_history=True)
        if not result.success:
            err = result.error_in_exec or result.error_before_exec
            status = "interrupted" if isinstance(err, KeyboardInterrupt) else "error"
    except KeyboardInterrupt:
        status = "interrupted"
    finally:
        _running["id"] = None
        _withdraw_tools()
        for name, value in saved_env.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
    with _lock:
        _drain(1)
        _drain(2)
        _capture.flush()
        stdout_text, stderr_text = _capture.text(1), _capture.text(2)
        send({"op": "done", "id": call_id, "status": status, "execution_count": execution_count,
              "stdout": stdout_text, "stderr": stderr_text, "outputs": list(_outputs)})
        _capture = Capture(1 << 20)

main()
