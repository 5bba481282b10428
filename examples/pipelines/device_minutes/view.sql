-- Run once in PostgreSQL: the per-device, per-minute aggregate over every batch's partial rows.
CREATE OR REPLACE VIEW device_minutes AS
SELECT device_id,
       minute,
       sum(readings) AS readings,
       sum(value_sum) / sum(readings) AS value_avg,
       min(value_min) AS value_min,
       max(value_max) AS value_max
FROM device_minute_partials
GROUP BY device_id, minute;
