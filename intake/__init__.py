"""Domain events in: ``mailbus intake`` turns events such as OrderPlaced into ``email_sends`` rows.

``mappings`` (which event becomes which mail) and ``events`` (bytes → decision) are pure;
``rows`` (PostgreSQL), ``dead_letters`` (the intake DLQ on Kafka) and ``app`` (faust) are
the adapters; ``service`` applies one batch; ``sample`` publishes sample events.
"""
