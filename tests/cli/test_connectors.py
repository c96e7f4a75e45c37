"""``speedlayer sources`` and ``speedlayer sinks``: the built-in connectors and the plug-ins', with their promises."""

from speedlayer.cli.app import main
from tests.core.test_plugins import SINK, SOURCE

GROUPS = {"speedlayer.sources": {"acme": "acme_connectors:AcmeSource", "half": "acme_connectors:Unfinished"},
          "speedlayer.sinks": {"acme": "acme_sinks:AcmeSink"}}


def test_sources_lists_each_scheme_with_what_it_promises_and_the_unusable_plugins(installed, capsys):
    installed("acme-connectors", GROUPS, {"acme_connectors": SOURCE, "acme_sinks": SINK})
    main(["sources"])
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == ("generator:// simulated fleet pings (or rides, app actions, transactions), paced and seeded "
                        "(replayable; modes: micro-batch, continuous; from speedlayer 0.1.0)")
    assert "socket://    lines of text from a TCP socket (for demos: at-most-once) (at-most-once: a restart may lose " \
           "events; modes: micro-batch, continuous; from speedlayer 0.1.0)" in lines
    assert "acme://      AcmeSource (replayable; modes: micro-batch; from acme-connectors 1.0)" in lines
    assert lines[-3:-1] == ["plug-ins not used (1):", "  source plug-in 'half' of package acme-connectors "
                            "(acme_connectors:Unfinished) is an abstract source (it lacks read_stream): point the entry "
                            "point at the right object, or uninstall acme-connectors"]


def test_sinks_lists_aliases_once_with_the_guarantee_and_modes(installed, capsys):
    installed("acme-connectors", GROUPS, {"acme_connectors": SOURCE, "acme_sinks": SINK})
    main(["sinks"])
    lines = capsys.readouterr().out.splitlines()
    postgres = [line for line in lines if "postgres" in line]
    assert postgres == ["postgresql: (also postgres:)  a PostgreSQL table, upserted by the output's key in one "
                        "transaction per batch (exactly-once; output modes: append, update, complete; trigger modes: "
                        "micro-batch; from speedlayer 0.1.0)"]
    assert ("acme:                         AcmeSink (at-least-once; output modes: append; trigger modes: micro-batch; "
            "from acme-connectors 1.0)") in lines
    assert lines[-1].startswith("use one with --sink OUTPUT=URI")
