#pragma once
// The trainers' main(): parse, check, load the data once per process, run on MPI ranks (mpiexec -n N) or on threads
// (--threads N), plot, and print one JSON object as the last line (summary.hpp), also appended to rank 0's
// --metrics file. Compiled once in the trainers' library (cli.cpp); each trainer's main() names its data and models.
//
// A mistake is one line on stderr. Mistakes on the command line (exit status 2) are found before MPI starts: every
// rank finds the same one and only the launcher's rank 0 prints it. Mistakes found once the ranks are known (a batch
// that does not split, a checkpoint of another rank count) and failures to load data are agreed on by all ranks:
// the lowest rank that failed prints, and every rank leaves through MPI_Finalize, so the launcher forwards the line.
// A failure during training (exit status 1) aborts the other ranks, after a pause that lets the line through.

#include <functional>
#include <memory>

#include "train.hpp"

namespace hitch_examples {

/// Builds the task (data and model) for a configuration; `keep` holds whatever the task points into.
using task_factory = std::function<task(const train_config&, std::shared_ptr<void>& keep)>;

/// The whole program: returns main()'s exit status.
int run_main(int argc, char** argv, const example_info& info, const task_factory& make_task);

}  // namespace hitch_examples
