"""Basic word2vec (skip-gram, NCE loss) example, ported from the TF1 tutorial.

Source: ``tensorflow/tensorflow: tensorflow/examples/tutorials/word2vec/word2vec_basic.py``
(text read at commit 05712d4690f39128f69d311e28b8e7181699394b), "Step 4: Build and train a
skip-gram model": the graph the program builds, up to and including ``tf.train.Saver()``.

Kept as written: the ``inputs`` name scope (placeholders, validation constant); the
``with tf.device('/cpu:0')`` pin around the ``embeddings`` variable + ``embedding_lookup`` and the
``weights``/``biases`` NCE variables; ``reduce_mean(nce_loss(...))``; the ``loss`` summary;
``GradientDescentOptimizer(1.0).minimize(loss)`` in the ``optimizer`` name scope; the cosine
similarity (``norm``, ``normalized_embeddings``, ``valid_embeddings``, ``similarity``) read
straight from the variable; ``summary.merge_all()``; ``global_variables_initializer()``;
``tf.train.Saver()``.

Changes:

* Data download, dictionary building, ``generate_batch``, the training loop (Step 5), the
  projector/TensorBoard writer and the t-SNE plot (Step 6) are dropped: they build no graph ops
  beyond the ones kept (the session is never run).
* Tiny sizes: vocabulary 50 (was 50000), batch 8, embedding 8 (was 128), 4 negative samples (was
  64), 4 validation words drawn from the first 10 (was 16 of 100) with a seeded
  ``np.random.RandomState(0)`` so every build is identical.
* The three ``tf.Variable``\\ s are resource variables: ``tf.compat.v1.Variable(...,
  use_resource=True)`` (TF1 made reference variables). So ``embedding_lookup`` and ``nce_loss``
  gather with ``ResourceGather`` and the similarity block reads ``embeddings`` through several
  ``ReadVariableOp`` nodes (``ReadVariableOp``, ``ReadVariableOp_1``, ...), kept on purpose.
* Added: ``global_step = tf.compat.v1.train.get_or_create_global_step()`` (in the ``optimizer``
  name scope) passed to ``minimize`` (the original calls ``minimize(loss)`` without one;
  SyncReplicasOptimizer requires it).
* Added for the corpus (the original is single-machine): the whole graph is built under
  ``tf.compat.v1.device(tf.compat.v1.train.replica_device_setter(ps_tasks=2))`` (default worker
  device ``/job:worker``), as TF's between-graph replication docs recommend; ``placed=False``
  leaves that out. The explicit ``'/cpu:0'`` pin stays inside it.
* Added for the corpus: with ``sync=True`` the optimizer is wrapped in
  ``tf.compat.v1.train.SyncReplicasOptimizer(opt, replicas_to_aggregate=2, total_num_replicas=3,
  name="w2v_sync")``. The program drives a plain ``tf.Session``, so the chief/worker ops are taken
  as a hand-driven program does (TF's ``tools/dist_test/python/mnist_replica.py`` pattern):
  ``local_init_op`` is ``chief_init_op`` on the chief and ``local_step_init_op`` elsewhere,
  ``ready_for_local_init_op`` is read, and only ``if is_chief:`` does it call
  ``get_chief_queue_runner()`` and ``get_init_tokens_op()`` -- hence ``CHIEF_ONLY = True`` (the
  chief's graph has the extra init-tokens ops).
* Removed APIs use ``tf.compat.v1`` (``placeholder``, ``random_uniform``, ``truncated_normal``,
  ``nn.embedding_lookup``, ``nn.nce_loss``, ``summary.*``, ``train.*``, ``name_scope``);
  ``tf.device`` is ``tf.compat.v1.device`` (TF 2's refuses device functions). The program's
  local ``graph`` is the fresh graph ``build`` exports; the module-level constants replace the
  function's locals.
"""

import math

import numpy as np
import tensorflow as tf

SOURCE = "tensorflow/tensorflow: tensorflow/examples/tutorials/word2vec/word2vec_basic.py"
SETTER = {"ps_tasks": 2}
SYNC = {"replicas_to_aggregate": 2, "total_replicas": 3, "name": "w2v_sync"}
CHIEF_ONLY = True

# Step 2/4 constants, shrunk.
vocabulary_size = 50
batch_size = 8
embedding_size = 8  # Dimension of the embedding vector.
skip_window = 1  # How many words to consider left and right.
num_skips = 2  # How many times to reuse an input to generate a label.
num_sampled = 4  # Number of negative examples to sample.
valid_size = 4  # Random set of words to evaluate similarity on.
valid_window = 10  # Only pick dev samples in the head of the distribution.


def build(placed, sync, is_chief=True):
  valid_examples = np.random.RandomState(0).choice(valid_window, valid_size, replace=False)

  graph = tf.Graph()

  with graph.as_default():
    # Added: between-graph replication device function (placed=True only).
    with tf.compat.v1.device(tf.compat.v1.train.replica_device_setter(**SETTER) if placed else None):

      # Input data.
      with tf.compat.v1.name_scope('inputs'):
        train_inputs = tf.compat.v1.placeholder(tf.int32, shape=[batch_size])
        train_labels = tf.compat.v1.placeholder(tf.int32, shape=[batch_size, 1])
        valid_dataset = tf.constant(valid_examples, dtype=tf.int32)

      # Ops and variables pinned to the CPU because of missing GPU implementation
      with tf.compat.v1.device('/cpu:0'):
        # Look up embeddings for inputs.
        with tf.compat.v1.name_scope('embeddings'):
          embeddings = tf.compat.v1.Variable(
              tf.compat.v1.random_uniform([vocabulary_size, embedding_size], -1.0, 1.0),
              use_resource=True)
          embed = tf.compat.v1.nn.embedding_lookup(embeddings, train_inputs)

        # Construct the variables for the NCE loss
        with tf.compat.v1.name_scope('weights'):
          nce_weights = tf.compat.v1.Variable(
              tf.compat.v1.truncated_normal([vocabulary_size, embedding_size],
                                            stddev=1.0 / math.sqrt(embedding_size)),
              use_resource=True)
        with tf.compat.v1.name_scope('biases'):
          nce_biases = tf.compat.v1.Variable(tf.zeros([vocabulary_size]), use_resource=True)

      # Compute the average NCE loss for the batch.
      # tf.nce_loss automatically draws a new sample of the negative labels each
      # time we evaluate the loss.
      with tf.compat.v1.name_scope('loss'):
        loss = tf.reduce_mean(
            tf.compat.v1.nn.nce_loss(
                weights=nce_weights,
                biases=nce_biases,
                labels=train_labels,
                inputs=embed,
                num_sampled=num_sampled,
                num_classes=vocabulary_size))

      # Add the loss value as a scalar to summary.
      tf.compat.v1.summary.scalar('loss', loss)

      # Construct the SGD optimizer using a learning rate of 1.0.
      with tf.compat.v1.name_scope('optimizer'):
        global_step = tf.compat.v1.train.get_or_create_global_step()  # added
        opt = tf.compat.v1.train.GradientDescentOptimizer(1.0)
        if sync:  # added: corpus sync mode
          opt = tf.compat.v1.train.SyncReplicasOptimizer(
              opt, replicas_to_aggregate=SYNC["replicas_to_aggregate"],
              total_num_replicas=SYNC["total_replicas"], name=SYNC["name"])
        optimizer = opt.minimize(loss, global_step=global_step)
        if sync:  # added: chief/worker sync ops for a hand-driven session
          local_init_op = opt.local_step_init_op
          if is_chief:
            local_init_op = opt.chief_init_op
          ready_for_local_init_op = opt.ready_for_local_init_op
          if is_chief:
            chief_queue_runner = opt.get_chief_queue_runner()
            sync_init_op = opt.get_init_tokens_op()

      # Compute the cosine similarity between minibatch examples and all
      # embeddings.
      norm = tf.sqrt(tf.reduce_sum(tf.square(embeddings), 1, keepdims=True))
      normalized_embeddings = embeddings / norm
      valid_embeddings = tf.compat.v1.nn.embedding_lookup(normalized_embeddings,
                                                          valid_dataset)
      similarity = tf.matmul(
          valid_embeddings, normalized_embeddings, transpose_b=True)

      # Merge all summaries.
      merged = tf.compat.v1.summary.merge_all()

      # Add variable initializer.
      init = tf.compat.v1.global_variables_initializer()

      # Create a saver.
      saver = tf.compat.v1.train.Saver()

    # Step 5 (not run): session.run([optimizer, merged, loss]); similarity.eval(); saver.save(...)
    del optimizer, similarity, merged, init, saver
    if sync:
      # The session loop (not run) would fetch these; mark_used() silences tf_should_use's
      # "never used" log for the report_uninitialized_variables result.
      ready_for_local_init_op.mark_used()
      del local_init_op, ready_for_local_init_op
      if is_chief:
        del chief_queue_runner, sync_init_op
    return tf.compat.v1.train.export_meta_graph(graph=graph, clear_devices=False)
