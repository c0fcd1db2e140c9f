#include "common/registry.h"

#include <algorithm>
#include <cstdint>
#include <memory>
#include <sstream>
#include <stdexcept>

namespace fa {
namespace {

std::vector<std::unique_ptr<StepInfo>>& storage() {
  static std::vector<std::unique_ptr<StepInfo>> s;
  return s;
}

std::vector<const StepInfo*>& ordered() {
  static std::vector<const StepInfo*> v;
  return v;
}

std::string join_dtypes(const std::vector<DType>& ts) {
  std::string out;
  for (DType t : ts) out += (out.empty() ? "" : ", ") + std::string(dtype_name(t));
  return out;
}

}  // namespace

StepRegistrar::StepRegistrar(const StepInfo& info) {
  storage().push_back(std::make_unique<StepInfo>(info));
  auto& v = ordered();
  v.push_back(storage().back().get());
  std::sort(v.begin(), v.end(),
            [](const StepInfo* a, const StepInfo* b) { return a->number < b->number; });
}

const std::vector<const StepInfo*>& steps() { return ordered(); }

const StepInfo* find_step(const std::string& key) {
  for (const StepInfo* s : steps()) {
    const std::string name = s->name;
    const std::string slug = name.substr(name.find('_') + 1);
    if (key == name || key == slug) return s;
    try {
      std::size_t used = 0;
      const int n = std::stoi(key, &used);
      if (used == key.size() && n == s->number) return s;
    } catch (const std::exception&) {
    }
  }
  return nullptr;
}

std::string step_names() {
  std::string out;
  for (const StepInfo* s : steps()) out += (out.empty() ? "" : ", ") + std::string(s->name);
  return out.empty() ? "(none registered)" : out;
}

std::string check_step(const StepInfo& step, const Problem& p) {
  if (std::string e = validate(p); !e.empty()) return e;
  std::ostringstream os;
  if (std::find(step.dtypes.begin(), step.dtypes.end(), p.dtype) == step.dtypes.end()) {
    os << "dtype (" << dtype_name(p.dtype) << ") is not supported by step " << step.name
       << " (supported: " << join_dtypes(step.dtypes) << ")";
    return os.str();
  }
  if (!step.head_dims.empty()) {
    if (std::find(step.head_dims.begin(), step.head_dims.end(), p.head_dim) ==
        step.head_dims.end()) {
      os << "head_dim (" << p.head_dim << ") is not supported by step " << step.name
         << " (supported:";
      for (int d : step.head_dims) os << ' ' << d;
      os << ')';
      return os.str();
    }
  } else if (p.head_dim > step.max_head_dim) {
    os << "head_dim (" << p.head_dim << ") exceeds step " << step.name << "'s limit of "
       << step.max_head_dim;
    return os.str();
  }
  if (p.causal && !step.causal) {
    os << "causal (true) is not supported by step " << step.name;
    return os.str();
  }
  if (p.heads_kv != p.heads_q && !step.gqa) {
    os << "heads_kv (" << p.heads_kv << ") must equal heads_q (" << p.heads_q << ") for step "
       << step.name << " (no GQA support)";
    return os.str();
  }
  return {};
}

namespace {

/// One device pointer a launch needs and the alignment its loads require.
struct NamedPointer {
  const char* name;
  const void* ptr;
  int align;
};

/// "" when every pointer is set and aligned, otherwise the first that is not.
std::string check_pointers(const StepInfo& step, const std::vector<NamedPointer>& ptrs) {
  std::ostringstream os;
  for (const NamedPointer& x : ptrs) {
    if (x.ptr == nullptr) {
      os << "pointer " << x.name << " is null";
      return os.str();
    }
    if (reinterpret_cast<std::uintptr_t>(x.ptr) % x.align != 0) {
      os << "pointer " << x.name << " (" << x.ptr << ") is not aligned to " << x.align
         << " bytes as step " << step.name << " requires";
      return os.str();
    }
  }
  return {};
}

}  // namespace

std::string check_launch(const StepInfo& step, const Problem& p, const DeviceTensors& t,
                         const DeviceLimits& device) {
  if (std::string e = check_step(step, p); !e.empty()) return e;
  if (step.run == nullptr) return std::string("step ") + step.name + " has no forward pass";
  const int a = step.alignment;
  if (std::string e = check_pointers(
          step, {{"q", t.q, a}, {"k", t.k, a}, {"v", t.v, a}, {"o", t.o, a}, {"lse", t.lse, 4}});
      !e.empty())
    return e;
  if (step.check_device) {
    if (std::string e = step.check_device(p, device); !e.empty()) return e;
  }
  return {};
}

std::string device_refusal(const StepInfo& step, const DeviceLimits& device) {
  // A step with a backward pass only is asked about its backward's launch.
  const auto& check = step.run ? step.check_device : step.check_backward_device;
  if (!check) return {};
  Problem p;
  if (!step.dtypes.empty()) p.dtype = step.dtypes.front();
  if (!step.head_dims.empty()) p.head_dim = step.head_dims.front();
  return check(p, device);
}

std::string check_backward_launch(const StepInfo& step, const Problem& p, const BackwardTensors& t,
                                  const DeviceLimits& device) {
  if (std::string e = check_step(step, p); !e.empty()) return e;
  if (step.backward == nullptr) return std::string("step ") + step.name + " has no backward pass";
  if (p.deterministic && !(step.backward_deterministic_dkdv &&
                           (step.backward_deterministic_dq || step.backward_deterministic_mode)))
    return std::string("deterministic (true) is not supported by step ") + step.name +
           "'s backward (its gradients are summed with floating-point atomics)";
  const int a = step.alignment;
  if (std::string e = check_pointers(step, {{"q", t.q, a},
                                            {"k", t.k, a},
                                            {"v", t.v, a},
                                            {"o", t.o, a},
                                            {"lse", t.lse, 4},
                                            {"d_o", t.d_o, a},
                                            {"dq", t.dq, a},
                                            {"dk", t.dk, a},
                                            {"dv", t.dv, a}});
      !e.empty())
    return e;
  if (step.check_backward_device) {
    if (std::string e = step.check_backward_device(p, device); !e.empty()) return e;
  }
  return {};
}

std::string check_fits(const char* step, const DeviceLimits& prop, const Problem& p,
                       std::size_t smem_bytes, const std::vector<GridNeed>& grid) {
  const std::string for_step = std::string(" for step ") + step;
  if (smem_bytes > prop.sharedMemPerBlockOptin)
    return "shared memory per block (" + std::to_string(smem_bytes) + " bytes for head_dim " +
           std::to_string(p.head_dim) + ") exceeds this device's sharedMemPerBlockOptin of " +
           std::to_string(prop.sharedMemPerBlockOptin) + " bytes" + for_step;
  for (const GridNeed& g : grid) {
    const long long limit = prop.maxGridSize[g.axis];
    if (g.blocks > limit)
      return g.what + " exceeds the grid " + "xyz"[g.axis] + " limit of " + std::to_string(limit) +
             for_step;
  }
  return {};
}

}  // namespace fa
