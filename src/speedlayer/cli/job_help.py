"""Commands whose first argument names a job, and whose ``--help`` lists that job's own flags too
(``speedlayer run fleet --help``, ``speedlayer train fraud --help``)."""

from __future__ import annotations

from typer.core import TyperCommand


class JobHelpCommand(TyperCommand):
    """A subclass says which job a name is (``named_job``) and which flags of it to list (``job_flags``)."""

    #: what ``--help`` says under "Job options" when no job is named
    unnamed = ""

    def parse_args(self, ctx, args):
        ctx.meta["speedlayer.args"] = list(args)
        return super().parse_args(ctx, args)

    def format_options(self, ctx, formatter) -> None:
        super().format_options(ctx, formatter)
        args = ctx.meta.get("speedlayer.args") or []
        job = self.named_job(args[0]) if args and not args[0].startswith("-") else None
        if job is None:
            with formatter.section("Job options"):
                formatter.write_text(self.unnamed)
            return
        title, flags, none = self.job_flags(job)
        rows = [(flag if no_value else f"{flag} VALUE", text) for flag, (_, _, no_value, text) in flags.items() if text]
        with formatter.section(title):
            formatter.write_dl(rows or [("(none)", none)])

    def named_job(self, name: str):
        """The job ``name`` names, or None (the help then says ``unnamed``)."""
        raise NotImplementedError

    def job_flags(self, job) -> tuple[str, dict, str]:
        """The section's title, the flags (``speedlayer.cli.job_flags``), and what to say when there are none."""
        raise NotImplementedError
