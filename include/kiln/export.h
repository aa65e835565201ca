#pragma once
// Exporting a traced function to a file and importing it again (MLX's
// export.h): export_function calls fun on the example arguments, records
// the graph its outputs need (every primitive with its parameters, the
// arrays it captured as constants) and writes it; import_function reads it
// back as a function that builds the same graph on new inputs of the same
// shapes and dtypes (any shapes with shapeless, where every node of the graph
// takes them: a node whose parameters fix its input shapes, such as a
// reshape, a broadcast or a slice, throws when they change).
//
// Differences from MLX: the file format is Kiln's own (MLX files are not
// read); the FunctionExporter / callback forms are not provided; a primitive
// whose parameters cannot be written yet (fused fast ops with custom
// fallbacks such as rope and attention, compiled regions, custom functions)
// makes export_function throw a kiln::Error naming it. Imported graphs run
// on the default stream of the default device at call time.
#include <functional>
#include <initializer_list>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "kiln/array.h"

namespace kiln {

using Args = std::vector<array>;
using Kwargs = std::unordered_map<std::string, array>;

void export_function(const std::string& file, const std::function<std::vector<array>(const Args&)>& fun,
                     const Args& args, bool shapeless = false, const std::string& metadata = "");
void export_function(const std::string& file, const std::function<std::vector<array>(const Kwargs&)>& fun,
                     const Kwargs& kwargs, bool shapeless = false, const std::string& metadata = "");
void export_function(const std::string& file,
                     const std::function<std::vector<array>(const Args&, const Kwargs&)>& fun, const Args& args,
                     const Kwargs& kwargs, bool shapeless = false, const std::string& metadata = "");

struct ExportedGraph;

struct ImportedFunction {
  std::vector<array> operator()(const std::initializer_list<array>& args) const { return (*this)(Args(args)); }
  std::vector<array> operator()(const Args& args) const;
  std::vector<array> operator()(const Kwargs& kwargs) const;
  std::vector<array> operator()(const Args& args, const Kwargs& kwargs) const;
  // The metadata saved with the function when it was exported.
  const std::string& metadata() const;

 private:
  friend ImportedFunction import_function(const std::string& file);
  explicit ImportedFunction(std::shared_ptr<const ExportedGraph> g) : graph_(std::move(g)) {}
  std::shared_ptr<const ExportedGraph> graph_;
};

ImportedFunction import_function(const std::string& file);

}  // namespace kiln
