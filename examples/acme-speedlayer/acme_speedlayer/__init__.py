"""acme-speedlayer: a shop's orders job, a synthetic order feed and a JSON-lines sink, as speedlayer plug-ins."""
