SELECT device_id,
       date_trunc('minute', reading_time) AS minute,
       count(*) AS readings,
       sum(value) AS value_sum,
       min(value) AS value_min,
       max(value) AS value_max
FROM {input}
GROUP BY device_id, date_trunc('minute', reading_time)
