// Hands a `hsring data` command over to hsring's Python package (python/hsring): for the
// offline steps that belong to Python's ecosystem (Hugging Face tokenizers, Jinja chat
// templates). Never on the training data path: the shards it writes are read by C++ alone.
#pragma once

#include <string>
#include <vector>

namespace hsring::data {

// Replaces this process with the interpreter running `module`'s main(argv) on `args`
// (module: "hsring.prepare.cli", ...). The interpreter is $HSRING_PYTHON, else python3 on
// PATH. The package is the python/ folder of the source tree this binary was built from,
// put first on PYTHONPATH when it is there, else wherever the interpreter finds `hsring`
// (pip install './python[data]'). A module the package needs that is missing (transformers,
// tokenizers, jinja2, numpy, hsring itself) is said with the one install command, exit 4.
// Returns only when the interpreter cannot be started: prints why (`command` names the
// caller, "hsring data prepare") and returns 4.
int exec_python_module(const std::string& command, const std::string& module,
                       const std::vector<std::string>& args);

// The command that installs the package with its `data` extra, for messages.
std::string python_install_command();

}  // namespace hsring::data
