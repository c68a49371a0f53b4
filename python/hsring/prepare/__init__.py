"""Chat datasets to token shards with a model's own tokenizer and chat template, the loss
mask on the assistant's tokens: `hsring data prepare` (python3 -m hsring.prepare), and
`hsring data inspect --doc` (hsring.prepare.show). Needs the `data` extra (transformers,
tokenizers, jinja2; pyarrow for Parquet). An offline step: nothing here runs while hsring
trains.

The modules, in the order data flows through them: records (files to records),
conversations (records to messages or text; engines: the files engines write when the
target regenerates the answers), masking (one rendering, tokens and flags),
output (shards and the summary), cli (flags, counting, exit codes); model_folder loads
the tokenizer, vocabulary size and stop tokens.
"""
