//! An HTTP app on an OS-chosen 127.0.0.1 port: what every fake model API
//! of these tests is served on.

/// Serve `app` on an OS-chosen 127.0.0.1 port; returns `http://127.0.0.1:PORT`.
pub async fn serve_local(app: axum::Router) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind 127.0.0.1");
    let url = format!("http://{}", listener.local_addr().expect("local addr"));
    tokio::spawn(async move { axum::serve(listener, app).await.expect("fake server") });
    url
}
