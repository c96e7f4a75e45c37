"""The fleet job's events: vehicle pings, and the ride requests of its second stream (``--rides``).

>>> VEHICLE_EVENT.time_field, RIDE_REQUEST.time_field
('event_time', 'request_time')
"""

from __future__ import annotations

from speedlayer.core.schemas import EventSchema, Field

VEHICLE_EVENT = EventSchema(
    name="vehicle ping",
    fields=(
        Field("event_id", "string"),
        Field("vehicle_id", "string"),
        Field("event_time", "timestamp"),
        Field("speed_kmh", "double", 0, 400),
        Field("lat", "double", -90, 90),
        Field("lon", "double", -180, 180),
    ),
    time_field="event_time",
)

#: a rider asking for a ride (the fleet job's second stream, ``--rides``)
RIDE_REQUEST = EventSchema(
    name="ride request",
    fields=(
        Field("request_id", "string"),
        Field("rider_id", "string"),
        Field("pickup_lat", "double", -90, 90),
        Field("pickup_lon", "double", -180, 180),
        Field("request_time", "timestamp"),
    ),
    time_field="request_time",
)
