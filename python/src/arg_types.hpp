// Argument and return types for the bindings' signatures.
//
// The bindings check their arguments themselves (convert.hpp), so they take Python objects
// unconverted. Taken as py::handle, help() would show every such argument as `handle`; these
// wrappers accept any object exactly as py::handle does but carry the name help() and the
// docstrings show, e.g. `ids: numpy.ndarray` or `shape: LanguageModelConfig | None = None`.
#pragma once

#include <pybind11/pybind11.h>

namespace lockstep::python {

namespace py = pybind11;

inline int any_object(PyObject*) { return 1; }

// An object of any type, shown in signatures as Tag::name.
template <class Tag>
class Typed : public py::object {
 public:
  PYBIND11_OBJECT_DEFAULT(Typed, py::object, any_object)
};

#define LOCKSTEP_PY_TYPE(Name, text)                                         \
  struct Name##Tag {                                                         \
    static constexpr auto name = py::detail::const_name(text);               \
  };                                                                         \
  using Name = Typed<Name##Tag>

LOCKSTEP_PY_TYPE(IdsArg, "numpy.ndarray");
LOCKSTEP_PY_TYPE(ParametersOrModelArg,
                 "ArrayLike | dict[str, ArrayLike | PackedTensor] | LanguageModelInference");
LOCKSTEP_PY_TYPE(OptionalArrayArg, "numpy.ndarray | None");
LOCKSTEP_PY_TYPE(OptionalConfigArg, "LanguageModelConfig | None");
LOCKSTEP_PY_TYPE(BoolArg, "bool");
LOCKSTEP_PY_TYPE(OptionalBoolArg, "bool | None");
LOCKSTEP_PY_TYPE(IntArg, "int");
LOCKSTEP_PY_TYPE(OptionalIntArg, "int | None");
LOCKSTEP_PY_TYPE(FloatArg, "float");
LOCKSTEP_PY_TYPE(BetasArg, "tuple[float, float]");
LOCKSTEP_PY_TYPE(PathArg, "str | os.PathLike");
LOCKSTEP_PY_TYPE(LengthsArg, "Sequence[int] | None");
LOCKSTEP_PY_TYPE(TokensArg, "bytes | str | Sequence[int]");
LOCKSTEP_PY_TYPE(ClassArg, "type");
LOCKSTEP_PY_TYPE(ArrayArg, "numpy.ndarray");
LOCKSTEP_PY_TYPE(StrArg, "str");
LOCKSTEP_PY_TYPE(StopArg, "bytes | str | None");
LOCKSTEP_PY_TYPE(CallbackArg, "Callable[[int], object] | None");
LOCKSTEP_PY_TYPE(MessagesArg, "list[dict[str, object]]");
// Return types
LOCKSTEP_PY_TYPE(InferenceResult, "LanguageModelInference");
LOCKSTEP_PY_TYPE(TrainerResult, "LanguageModelHostTrainer");
LOCKSTEP_PY_TYPE(GeneratedResult, "str | bytes | list[int]");
LOCKSTEP_PY_TYPE(PromptResult, "str | list[int]");

#undef LOCKSTEP_PY_TYPE

}  // namespace lockstep::python

namespace pybind11::detail {
template <class Tag>
struct handle_type_name<lockstep::python::Typed<Tag>> {
  static constexpr auto name = Tag::name;
};
}  // namespace pybind11::detail
