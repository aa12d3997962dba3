#include "kestrel/train/trainer.h"

#include "kestrel/models/model_builder.h"

#include "kestrel/train/training_run.h"

namespace kestrel::train {

double fitness(double map50, double map) { return 0.1 * map50 + 0.9 * map; }

// The phases of training_run.cpp, in the order that fixes the console output, the run folder and the
// seeded weight initialisation.
TrainResult train(const TrainOptions& requested) {
  TrainingRun run;
  run.read_options(requested);  // --resume: the saved options replace the command line's
  run.join_ranks();             // only rank 0 prints, validates and writes the run folder
  const TrainOptions& o = run.o;

  // ---- hyperparameters, model, data --------------------------------------------------------------
  run.load_recipe();
  run.build_model();
  run.build_data();
  run.run_autoanchor();

  // ---- optimiser, schedule, scaler; resume state; loss, EMA, step -----------------------------------
  run.build_optimiser();
  if (run.resuming()) run.restore_resume_state();
  run.choose_run_dir();
  run.build_step();  // after AutoAnchor and the resume: the losses copy the head's anchors
  run.open_run_files();

  // ---- the loop -------------------------------------------------------------------------------------
  run.start_epochs();
  Progression& progress = run.progression;
  bool stop = false;
  for (; progress.epoch < o.epochs && !stop; ++progress.epoch, progress.next_batch = 0) {
    run.begin_epoch();
    const EpochTotals totals = run.run_batches();
    if (totals.interrupted) {
      run.save_interrupted();
      break;
    }
    stop = run.end_epoch(totals);  // validate the EMA, log, save
  }
  run.end_epochs();
  return run.finish();
}

}  // namespace kestrel::train
