"""jsonl:out/dir — each micro-batch of an output as one JSON-lines file, batch-<id>.jsonl."""

import os

from pyspark.sql import functions as F

from speedlayer import APPEND, EXACTLY_ONCE, Sink, SinkError


class JsonLinesSink(Sink):
    scheme = "jsonl"
    summary = "each micro-batch as one JSON-lines file, batch-<id>.jsonl"
    guarantee = EXACTLY_ONCE  # transactional by batch id: a replayed batch replaces its own file
    modes = (APPEND,)
    writes_batches = True     # it writes through foreachBatch (per-batch outputs fit too)

    def __init__(self, uri):
        super().__init__(uri)
        self.path = uri.local_path()

    def destination(self, job, output):
        return ("directory", str(self.path))  # two outputs into one directory are refused before start

    def check(self, output_name, fresh_checkpoint):
        if fresh_checkpoint and any(self.path.glob("batch-*.jsonl")):
            raise SinkError(f"{self.path} holds batches of another run: remove that directory, "
                            "or resume the run that wrote them with its --state-dir")

    def start(self, writer, df, target):
        folder = self.path

        def write(batch, batch_id: int) -> None:  # on the driver, once per micro-batch
            lines = [row[0] for row in batch.select(F.to_json(F.struct("*"))).collect()]  # small outputs only
            folder.mkdir(parents=True, exist_ok=True)
            partial = folder / f".batch-{batch_id}.jsonl.partial"
            partial.write_text("".join(f"{line}\n" for line in lines))
            os.replace(partial, folder / f"batch-{batch_id}.jsonl")  # the whole batch, or nothing

        return writer.foreachBatch(write).start()
