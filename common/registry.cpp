#include "common/registry.h"

#include <algorithm>
#include <cstdint>
#include <memory>
#include <sstream>
#include <stdexcept>

#include "common/decode_registry.h"

namespace fa {
namespace {

/// The registered steps of one kind (forward/backward: StepInfo; decoding: DecodeStepInfo),
/// owned, and in chapter order. One per kind, built on first use (before main(), by the
/// registrars), so the order of static initialisation across files does not matter.
template <class Info>
struct Registry {
  std::vector<std::unique_ptr<Info>> storage;
  std::vector<const Info*> ordered;

  static Registry& get() {
    static Registry r;
    return r;
  }
  void add(const Info& info) {
    storage.push_back(std::make_unique<Info>(info));
    ordered.push_back(storage.back().get());
    // Stable: steps of one number (a decoding step and its candidate) keep their order.
    std::stable_sort(ordered.begin(), ordered.end(),
                     [](const Info* a, const Info* b) { return a->number < b->number; });
  }
};

std::string join_dtypes(const std::vector<DType>& ts) {
  std::string out;
  for (DType t : ts) out += (out.empty() ? "" : ", ") + std::string(dtype_name(t));
  return out;
}

}  // namespace

StepRegistrar::StepRegistrar(const StepInfo& info) { Registry<StepInfo>::get().add(info); }

const std::vector<const StepInfo*>& steps() { return Registry<StepInfo>::get().ordered; }

namespace {

/// Does `key` name the step called `name` with chapter `number` (name, slug or number)?
/// A `number` that no key names (a candidate decoding step answers to its name only).
constexpr int kNoNumber = -1;

bool names_step(const std::string& key, const std::string& name, int number) {
  const std::string slug = name.substr(name.find('_') + 1);
  if (key == name || key == slug) return true;
  try {
    std::size_t used = 0;
    const int n = std::stoi(key, &used);
    return used == key.size() && number != kNoNumber && n == number;
  } catch (const std::exception&) {
    return false;
  }
}

}  // namespace

const StepInfo* find_step(const std::string& key) {
  for (const StepInfo* s : steps())
    if (names_step(key, s->name, s->number)) return s;
  return nullptr;
}

std::string step_names() {
  std::string out;
  for (const StepInfo* s : steps()) out += (out.empty() ? "" : ", ") + std::string(s->name);
  return out.empty() ? "(none registered)" : out;
}

namespace {

/// "" when `step` accepts dtype `t` and head dim `d` (one of `head_dims`; any when empty),
/// otherwise the message.
std::string check_types(const char* step, const std::vector<DType>& dtypes,
                        const std::vector<int>& head_dims, DType t, int d) {
  std::ostringstream os;
  if (std::find(dtypes.begin(), dtypes.end(), t) == dtypes.end()) {
    os << "dtype (" << dtype_name(t) << ") is not supported by step " << step
       << " (supported: " << join_dtypes(dtypes) << ")";
    return os.str();
  }
  if (!head_dims.empty() && std::find(head_dims.begin(), head_dims.end(), d) == head_dims.end()) {
    os << "head_dim (" << d << ") is not supported by step " << step << " (supported:";
    for (int x : head_dims) os << ' ' << x;
    os << ')';
    return os.str();
  }
  return {};
}

}  // namespace

std::string check_step(const StepInfo& step, const Problem& p) {
  if (std::string e = validate(p); !e.empty()) return e;
  if (std::string e = check_types(step.name, step.dtypes, step.head_dims, p.dtype, p.head_dim);
      !e.empty())
    return e;
  std::ostringstream os;
  if (step.head_dims.empty() && p.head_dim > step.max_head_dim) {
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
std::string check_pointers(const char* step, const std::vector<NamedPointer>& ptrs) {
  std::ostringstream os;
  for (const NamedPointer& x : ptrs) {
    if (x.ptr == nullptr) {
      os << "pointer " << x.name << " is null";
      return os.str();
    }
    if (reinterpret_cast<std::uintptr_t>(x.ptr) % x.align != 0) {
      os << "pointer " << x.name << " (" << x.ptr << ") is not aligned to " << x.align
         << " bytes as step " << step << " requires";
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
          step.name,
          {{"q", t.q, a}, {"k", t.k, a}, {"v", t.v, a}, {"o", t.o, a}, {"lse", t.lse, 4}});
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

std::string check_backward_mode(const StepInfo& step, const Problem& p) {
  if (step.backward == nullptr) return std::string("step ") + step.name + " has no backward pass";
  if (p.deterministic && !(step.backward_deterministic_dkdv &&
                           (step.backward_deterministic_dq || step.backward_deterministic_mode)))
    return std::string("deterministic (true) is not supported by step ") + step.name +
           "'s backward (its gradients are summed with floating-point atomics)";
  return {};
}

std::string check_backward_launch(const StepInfo& step, const Problem& p, const BackwardTensors& t,
                                  const DeviceLimits& device) {
  if (std::string e = check_step(step, p); !e.empty()) return e;
  if (std::string e = check_backward_mode(step, p); !e.empty()) return e;
  const int a = step.alignment;
  if (std::string e = check_pointers(step.name, {{"q", t.q, a},
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

// ---------------------------------------------------------------------------------------------
// Decoding steps (decode_registry.h)
// ---------------------------------------------------------------------------------------------

DecodeStepRegistrar::DecodeStepRegistrar(const DecodeStepInfo& info) {
  auto& r = Registry<DecodeStepInfo>::get();
  r.add(info);
  // A chapter's candidate next version comes after the chapter's step, whatever the order
  // of registration (the order of static initialisation across files is unspecified).
  std::stable_sort(
      r.ordered.begin(), r.ordered.end(), [](const DecodeStepInfo* a, const DecodeStepInfo* b) {
        return a->number != b->number ? a->number < b->number : !a->candidate && b->candidate;
      });
}

const std::vector<const DecodeStepInfo*>& decode_steps() {
  return Registry<DecodeStepInfo>::get().ordered;
}

const DecodeStepInfo* find_decode_step(const std::string& key) {
  for (const DecodeStepInfo* s : decode_steps())
    if (names_step(key, s->name, s->candidate ? kNoNumber : s->number)) return s;
  return nullptr;
}

std::string check_decode_step(const DecodeStepInfo& step, const DecodeProblem& p) {
  if (std::string e = validate(p); !e.empty()) return e;
  return check_types(step.name, step.dtypes, step.head_dims, p.dtype, p.head_dim);
}

std::string device_refusal(const DecodeStepInfo& step, const DeviceLimits& device) {
  if (!step.check_device) return {};
  DecodeProblem p;
  p.cache_lens = {0};
  p.n_max = 1;
  if (!step.dtypes.empty()) p.dtype = step.dtypes.front();
  if (!step.head_dims.empty()) p.head_dim = step.head_dims.front();
  return step.check_device(p, 1, device);
}

std::string check_decode_launch(const DecodeStepInfo& step, const DecodeProblem& p,
                                const DecodeTensors& t, int num_splits,
                                const DeviceLimits& device) {
  if (std::string e = check_decode_step(step, p); !e.empty()) return e;
  if (step.run == nullptr) return std::string("step ") + step.name + " has no entry point";
  if (num_splits < 1 || num_splits > step.max_splits) {
    std::ostringstream os;
    os << "num_splits (" << num_splits << ") must be in [1, " << step.max_splits << "] for step "
       << step.name;
    return os.str();
  }
  const int a = step.alignment;
  std::vector<NamedPointer> ptrs = {{"q", t.q, a},
                                    {"k_new", t.k_new, a},
                                    {"v_new", t.v_new, a},
                                    {"k_cache", t.k_cache, a},
                                    {"v_cache", t.v_cache, a},
                                    {"cache_lens", t.cache_lens, 4},
                                    {"o", t.o, a},
                                    {"lse", t.lse, 4}};
  if (p.cache == CacheKind::Paged) ptrs.push_back({"block_table", t.block_table, 4});
  if (std::string e = check_pointers(step.name, ptrs); !e.empty()) return e;
  if (step.check_device) {
    if (std::string e = step.check_device(p, num_splits, device); !e.empty()) return e;
  }
  return {};
}

std::string check_decode_workspace(const DecodeStepInfo& step, const DecodeProblem& p,
                                   int num_splits, const void* workspace) {
  const std::size_t need = step.workspace_bytes ? step.workspace_bytes(p, num_splits) : 0;
  std::ostringstream os;
  if (need > 0 && workspace == nullptr) {
    os << "workspace is null but step " << step.name << " needs " << need << " bytes";
    return os.str();
  }
  if (step.alignment > 0 && reinterpret_cast<std::uintptr_t>(workspace) % step.alignment != 0) {
    os << "workspace (" << workspace << ") is not aligned to " << step.alignment
       << " bytes as step " << step.name << " requires";
    return os.str();
  }
  return {};
}

}  // namespace fa
