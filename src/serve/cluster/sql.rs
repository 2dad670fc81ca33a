//! The queue's statements, run by their text and prepared once per pooled
//! connection: a statement sent as text is parsed again each time, a
//! second round trip per statement on every turn's path.

use deadpool_postgres::GenericClient;
use tokio_postgres::types::ToSql;
use tokio_postgres::{Error, Row};

pub(super) async fn execute(
    client: &impl GenericClient,
    sql: &str,
    params: &[&(dyn ToSql + Sync)],
) -> Result<u64, Error> {
    let statement = client.prepare_cached(sql).await?;
    client.execute(&statement, params).await
}

pub(super) async fn query(
    client: &impl GenericClient,
    sql: &str,
    params: &[&(dyn ToSql + Sync)],
) -> Result<Vec<Row>, Error> {
    let statement = client.prepare_cached(sql).await?;
    client.query(&statement, params).await
}

pub(super) async fn query_opt(
    client: &impl GenericClient,
    sql: &str,
    params: &[&(dyn ToSql + Sync)],
) -> Result<Option<Row>, Error> {
    let statement = client.prepare_cached(sql).await?;
    client.query_opt(&statement, params).await
}

pub(super) async fn query_one(
    client: &impl GenericClient,
    sql: &str,
    params: &[&(dyn ToSql + Sync)],
) -> Result<Row, Error> {
    let statement = client.prepare_cached(sql).await?;
    client.query_one(&statement, params).await
}
