"""Data: the encoded corpus (:mod:`.corpus`), separator formats (:mod:`.formats`), instance
building per mode (:mod:`.instances`), and batching (:mod:`.batching`).

The names most code needs are importable from ``docnmt.data`` directly.
"""
from .batching import InstanceSet, model_inputs, pad_batch, token_batches
from .corpus import Corpus, Side
from .formats import Joiner, split_at_eos
from .instances import (
                        ModeConfig,
                        build_instances,
                        doc2doc_instances,
                        doc2sent_instances,
                        doc_bounds,
                        filter_training_documents,
                        greedy_split,
                        mr_instances,
                        pseudodoc_instances,
                        sent_instances,
                        sentence_costs,
                        with_sentences,
)

__all__ = ["Corpus", "InstanceSet", "Joiner", "ModeConfig", "Side", "build_instances", "doc2doc_instances",
           "doc_bounds", "doc2sent_instances", "filter_training_documents", "greedy_split", "model_inputs",
           "mr_instances", "pad_batch", "pseudodoc_instances", "sent_instances", "sentence_costs", "split_at_eos",
           "token_batches", "with_sentences"]
