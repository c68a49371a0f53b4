#include "data/python_handoff.h"

#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>

#include "common/error.h"
#include "common/syscheck.h"

namespace hsring::data {

namespace {

// Set by data/CMakeLists.txt: the source tree's python/ folder.
constexpr const char* kSourcePackageDir = HSRING_PYTHON_PACKAGE_DIR;

// The python/ folder when this binary's source tree still holds the package.
std::string source_package_dir() {
  std::error_code ec;
  const std::filesystem::path dir(kSourcePackageDir);
  return std::filesystem::is_regular_file(dir / "hsring" / "prepare" / "cli.py", ec) ? dir.string()
                                                                                     : "";
}

// Runs the module's main on argv[3:]; a missing dependency (only those: another
// ModuleNotFoundError is a bug to show whole) becomes one line with the install command.
// argv[1] and argv[2] carry the command's name and the install command, so that no text
// of the caller's is quoted into Python source.
std::string bootstrap(const std::string& module) {
  return "import sys\n"
         "command, install, args = sys.argv[1], sys.argv[2], sys.argv[3:]\n"
         "try:\n"
         "    from " +
         module +
         " import main\n"
         "    code = main(args)\n"
         "except ModuleNotFoundError as e:\n"
         "    if (e.name or '').split('.')[0] not in "
         "('hsring', 'numpy', 'transformers', 'tokenizers', 'jinja2'):\n"
         "        raise\n"
         "    sys.stderr.write('%s: error: the Python module %r is missing (python: %s); '\n"
         "                     'install hsring\\'s Python package with its data extra:\\n'\n"
         "                     '    %s -m pip install %s\\n'\n"
         "                     % (command, e.name, sys.executable, sys.executable, install))\n"
         "    code = 4\n"
         "sys.exit(code)\n";
}

}  // namespace

std::string python_install_command() {
  const std::string dir = source_package_dir();
  return "'" + (dir.empty() ? std::string("./python") : dir) + "[data]'";
}

int exec_python_module(const std::string& command, const std::string& module,
                       const std::vector<std::string>& args) {
  const char* chosen = std::getenv("HSRING_PYTHON");
  const std::string python = chosen && *chosen ? chosen : "python3";
  const std::string dir = source_package_dir();
  if (!dir.empty()) {
    const char* old = std::getenv("PYTHONPATH");
    const std::string path = old && *old ? dir + ":" + old : dir;
    ::setenv("PYTHONPATH", path.c_str(), 1);
  }
  std::vector<std::string> argv_text = {python, "-c", bootstrap(module), command,
                                        python_install_command()};
  argv_text.insert(argv_text.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& a : argv_text) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::cout.flush();
  ::execvp(python.c_str(), argv.data());
  const int err = errno;
  std::cerr << command << ": error: cannot run the Python interpreter '" << python
            << "': " << errno_text(err)
            << " (set HSRING_PYTHON to one); it needs hsring's Python package with its data "
               "extra: "
            << python << " -m pip install " << python_install_command() << "\n";
  return exit_code_of(ErrorClass::kSystem);
}

}  // namespace hsring::data
