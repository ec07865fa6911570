"""The Spark source and sink against a TLS cluster (docs/security.md, docs/spark.md).

A cluster of one controller and one broker with ``[tls]`` (client certificates required); a
batch write with ``security.protocol=SSL`` and the CA, certificate and key options lands, and
a batch read with them reads it back. (Clients without the right TLS settings are refused:
tests/integration/test_tls.py; through Spark that shows as the driver's lookup timing out.)
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from cluster_harness import ClusterHarness, certificate_name

from tidelog.certs import issue, make_ca
from tidelog.client import Admin, NewTopic

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def tls_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, dict[str, str]]]:
    pki = tmp_path_factory.mktemp("spark-pki")
    ca = make_ca()
    (pki / "ca.crt").write_bytes(ca.cert_pem)
    for name in ("controller-1", "broker-1", "spark-app"):
        cert = issue(ca, certificate_name(name), hosts=("127.0.0.1",))
        (pki / f"{name}.crt").write_bytes(cert.cert_pem)
        (pki / f"{name}.key").write_bytes(cert.key_pem)
        (pki / f"{name}.key").chmod(0o600)
    tls = {"ca_file": str(pki / "ca.crt"), "cert_file": f"{pki}/{{name}}.crt",
           "key_file": f"{pki}/{{name}}.key", "client_auth": "required"}
    cluster = ClusterHarness.create(tmp_path_factory.mktemp("spark-tls") / "cluster",
                                    controllers=1, brokers=1, overrides={"tls": tls})
    try:
        cluster.start_controllers()
        cluster.start_brokers()
        options = {"security.protocol": "SSL", "ssl.cafile": str(pki / "ca.crt"),
                   "ssl.certfile": str(pki / "spark-app.crt"),
                   "ssl.keyfile": str(pki / "spark-app.key")}
        yield f"127.0.0.1:{cluster.node('broker-1').broker_port}", options
    finally:
        cluster.close()


def test_write_and_read_over_tls(spark: Any, tls_cluster: tuple[str, dict[str, str]]) -> None:
    bootstrap, tls = tls_cluster
    client = {k.replace(".", "_"): v for k, v in tls.items()}
    with Admin(bootstrap, **client) as admin:  # type: ignore[arg-type]
        admin.create_topics([NewTopic("spark-tls", 2, 1)]).all()
    rows = [(f"k{i}", f"v{i}") for i in range(50)]
    df = spark.createDataFrame(rows, "key STRING, value STRING")
    writer = df.write.format("tidelog").option("bootstrap.servers", bootstrap) \
        .option("topic", "spark-tls").mode("append")
    for name, value in tls.items():
        writer = writer.option(name, value)
    writer.save()
    reader = spark.read.format("tidelog").option("bootstrap.servers", bootstrap) \
        .option("subscribe", "spark-tls")
    for name, value in tls.items():
        reader = reader.option(name, value)
    got = reader.load().selectExpr("CAST(key AS STRING) k", "CAST(value AS STRING) v").collect()
    assert sorted((r.k, r.v) for r in got) == sorted(rows)
