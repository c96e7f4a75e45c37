"""What every floor uses and that uses nothing of speedlayer's: errors, durations, URIs, schemas, geo."""
