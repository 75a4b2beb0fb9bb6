// A container's persistent Pythons: its contexts, their kernels, the processes a
// restored sandbox brought back, and the cell paused on tool calls.
#include "service/container_python.h"

#include <algorithm>

#include "base/ids.h"
#include "runtime/sandbox.h"
#include "service/python_kernel.h"

namespace sandboxd::service {

std::vector<PythonContext> ContainerPython::contexts() const {
  std::lock_guard lock(mutex_);
  std::vector<PythonContext> out{PythonContext{std::string(kDefaultPythonContext), {}}};
  for (const auto& named : contexts_) out.push_back(named.context);
  return out;
}

bool ContainerPython::has_context(const std::string& id) const {
  if (id == kDefaultPythonContext) return true;
  std::lock_guard lock(mutex_);
  return std::any_of(contexts_.begin(), contexts_.end(),
                     [&](const NamedPython& named) { return named.context.id == id; });
}

std::optional<PythonContext> ContainerPython::add_context(std::string cwd, size_t max_contexts) {
  std::lock_guard lock(mutex_);
  if (contexts_.size() + 1 >= max_contexts) return std::nullopt;
  PythonContext context{"ctx_" + random_alnum(20), std::move(cwd)};
  contexts_.push_back({context, nullptr});
  return context;
}

bool ContainerPython::restart_context(const std::string& id) {
  std::lock_guard lock(mutex_);
  if (id == kDefaultPythonContext) {
    if (kernel_) kernel_->restart();
    return true;
  }
  for (auto& named : contexts_)
    if (named.context.id == id) {
      if (named.kernel) named.kernel->restart();
      return true;
    }
  return false;
}

std::optional<std::shared_ptr<PythonKernel>> ContainerPython::remove_context(const std::string& id) {
  std::lock_guard lock(mutex_);
  auto it = std::find_if(contexts_.begin(), contexts_.end(),
                         [&](const NamedPython& named) { return named.context.id == id; });
  if (it == contexts_.end()) return std::nullopt;
  std::shared_ptr<PythonKernel> kernel = std::move(it->kernel);
  contexts_.erase(it);
  return kernel;
}

std::shared_ptr<PythonKernel> ContainerPython::kernel_for(
    const std::string& context, const runtime::Sandbox& sandbox,
    const std::function<std::shared_ptr<PythonKernel>(const std::string& cwd)>& make) {
  std::lock_guard lock(mutex_);
  std::shared_ptr<PythonKernel>* slot = nullptr;
  std::string cwd;
  if (context == kDefaultPythonContext) {
    slot = &kernel_;
  } else {
    for (auto& named : contexts_)
      if (named.context.id == context) {
        slot = &named.kernel;
        cwd = named.context.cwd;
        break;
      }
    if (!slot) return nullptr;
  }
  if (!*slot || (*slot)->sandbox() != &sandbox) *slot = make(cwd);
  // A kernel whose process came back with a restored sandbox (container_memory.cc)
  // takes it over at its first call; the context's other kernels start fresh.
  if (auto it = restored_.find(context); it != restored_.end()) {
    if (sandbox.restored() && (*slot)->sandbox() == &sandbox) (*slot)->adopt_on_first_call(it->second);
    restored_.erase(it);
  }
  return *slot;
}

ContainerPython::Kernels ContainerPython::kernels_of(const runtime::Sandbox& sandbox) const {
  std::lock_guard lock(mutex_);
  Kernels out;
  out.not_taken_over = restored_;
  auto of_this_sandbox = [&](const std::shared_ptr<PythonKernel>& kernel) {
    return kernel && kernel->sandbox() == &sandbox;
  };
  if (of_this_sandbox(kernel_)) out.of_sandbox.emplace_back(std::string(kDefaultPythonContext), kernel_);
  for (const auto& named : contexts_)
    if (of_this_sandbox(named.kernel)) out.of_sandbox.emplace_back(named.context.id, named.kernel);
  return out;
}

void ContainerPython::set_restored(std::map<std::string, uint32_t> processes) {
  std::lock_guard lock(mutex_);
  restored_ = std::move(processes);
}

void ContainerPython::pause(PausedCode paused) {
  std::lock_guard lock(mutex_);
  paused.kernel = kernel_;
  paused_code_ = std::move(paused);
}

std::optional<ContainerPython::PausedCode> ContainerPython::take_paused(
    const std::string& server_tool_id, const std::function<bool(const PausedCode&)>& accept) {
  std::lock_guard lock(mutex_);
  if (!paused_code_ || paused_code_->server_tool_id != server_tool_id ||
      std::chrono::steady_clock::now() >= paused_code_->expires)
    return std::nullopt;
  if (!accept(*paused_code_)) return std::nullopt;
  std::optional<PausedCode> taken = std::move(paused_code_);
  paused_code_.reset();  // this request resumes it; another finds it taken
  return taken;
}

void ContainerPython::put_back_paused(PausedCode paused) {
  std::lock_guard lock(mutex_);
  if (!paused_code_) paused_code_ = std::move(paused);
}

}  // namespace sandboxd::service
