// A cap on how many parameter values the model builder may allocate on this thread.
//
// A weights file carries its own model YAML and class names, and kestrel builds that network before it
// compares the file's tensors with it. A corrupt or crafted file whose YAML says width_multiple: 100 would
// make the builder allocate (and initialise) gigabytes first. A network that matches the file needs
// exactly as many values as the file's tensors hold, so load_model_weights builds under a budget of that
// many: every layer charges its tensors' sizes *before* allocating them, and the first charge over the
// budget throws. Outside a budget, charging costs a thread-local read and does nothing. Only parameters
// are charged: the activations of the stride probe (a 256 x 256 image) are not, so a config that keeps
// the parameters small but upsamples or pads hugely is not caught here.
#pragma once
#include <cstdint>
#include <initializer_list>
#include <string>

namespace kestrel::models {

class ParameterBudget {
 public:
  // Active on this thread until destroyed; budgets do not nest (a second one replaces the first until it ends).
  explicit ParameterBudget(int64_t max_values);
  ~ParameterBudget();
  ParameterBudget(const ParameterBudget&) = delete;
  ParameterBudget& operator=(const ParameterBudget&) = delete;

  int64_t max_values() const { return max_values_; }
  int64_t charged() const { return charged_; }  // > max_values() once a charge was refused
  bool exceeded() const { return charged_ > max_values_; }

 private:
  friend void charge_parameters(const char*, std::initializer_list<int64_t>);
  int64_t max_values_;
  int64_t charged_ = 0;
  ParameterBudget* previous_;
};

// Whether a budget is active on this thread.
bool parameter_budget_active();

// Charges one tensor of shape `dims` (its element count, overflow-safe) to this thread's budget, if any.
// Throws kestrel::Error naming `what` when the budget would be exceeded.
void charge_parameters(const char* what, std::initializer_list<int64_t> dims);

}  // namespace kestrel::models
