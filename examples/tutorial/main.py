"""main.py of TensorFlow's multi-worker Keras tutorial, run by the chart without a new image:

    helm install tutorial charts/tf-multiworker -f values/dev.yaml \
      --set-file 'training.files.main\\.py=examples/tutorial/main.py' \
      --set-file 'training.files.mnist_setup\\.py=examples/tutorial/mnist_setup.py' \
      --set 'training.command={python,/opt/tf-multiworker/files/main.py}'

The launcher sets TF_CONFIG; Python finds mnist_setup beside this file. Added to the
tutorial: BackupAndRestore and the chief's save on shared storage (TFMW_SHARED_DIR/TFMW_RUN_ID),
so a restarted group resumes and the model outlives the pods; and `--epochs` /
`--steps-per-epoch` (training.args; the tutorial's 3 x 70 by default).
"""

import argparse
import json
import os

import mnist_setup  # sets TF_USE_LEGACY_KERAS before TensorFlow is imported
import tensorflow as tf

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=3)
parser.add_argument("--steps-per-epoch", type=int, default=70)
args = parser.parse_args()

per_worker_batch_size = 64
tf_config = json.loads(os.environ["TF_CONFIG"])
num_workers = len(tf_config["cluster"]["worker"])

strategy = tf.distribute.MultiWorkerMirroredStrategy()

global_batch_size = per_worker_batch_size * num_workers
multi_worker_dataset = mnist_setup.mnist_dataset(global_batch_size)

with strategy.scope():
    # Model building/compiling need to be within `strategy.scope()`.
    multi_worker_model = mnist_setup.build_and_compile_cnn_model()

run_dir = os.path.join(os.environ.get("TFMW_SHARED_DIR", "/tmp"), os.environ.get("TFMW_RUN_ID", "tutorial"))
backup = tf.keras.callbacks.BackupAndRestore(backup_dir=os.path.join(run_dir, "backup"))
multi_worker_model.fit(
    multi_worker_dataset, epochs=args.epochs, steps_per_epoch=args.steps_per_epoch, callbacks=[backup], verbose=2
)

# Every worker saves (the save runs collectives); only the chief's copy is kept (the tutorial's
# write_filepath pattern).
task_type, task_id = strategy.cluster_resolver.task_type, strategy.cluster_resolver.task_id
is_chief = task_type is None or task_type == "chief" or (task_type == "worker" and task_id == 0)
model_path = os.path.join(run_dir, "model")
target = model_path if is_chief else os.path.join(run_dir, f"workertemp_{task_id}", "model")
multi_worker_model.save(target)
if not is_chief:
    tf.io.gfile.rmtree(os.path.dirname(target))
print(f"tutorial saved model={model_path} chief={is_chief}", flush=True)
