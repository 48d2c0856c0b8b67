"""Score Elasticsearch ``rank_features`` query bodies with Lucene itself (run as a subprocess).

Usage: ``python lucene_feature_search.py ANSERINI_JAR BULK.ndjson BODIES.json OUT.json``

Builds an in-memory Lucene index (Lucene 9.9.1 from Anserini's fat jar, through pyjnius) the way
Elasticsearch's and OpenSearch's ``rank_features`` mapper does, one
``FeatureField(field, key, value)`` per feature of each ``_bulk`` source line, and runs each body
as they do: ``bool.should`` → ``BooleanQuery`` of ``SHOULD`` clauses, each ``rank_feature`` with
``linear`` and ``boost`` → ``FeatureField.newLinearQuery(field, key, boost)``. Writes, per body,
the top ``size`` hits as ``[[doc_id, score], ...]``. A subprocess, so that the JVM lives and
dies with it.
"""

from __future__ import annotations

import json
import sys


def main(jar: str, bulk: str, bodies_path: str, out: str) -> None:
    import jnius_config

    jnius_config.set_classpath(jar)
    from jnius import autoclass

    classes = {
        "FeatureField": "document.FeatureField",
        "StringField": "document.StringField",
        "Store": "document.Field$Store",
        "Document": "document.Document",
        "Directory": "store.ByteBuffersDirectory",
        "IndexWriter": "index.IndexWriter",
        "IndexWriterConfig": "index.IndexWriterConfig",
        "DirectoryReader": "index.DirectoryReader",
        "IndexSearcher": "search.IndexSearcher",
        "Builder": "search.BooleanQuery$Builder",
        "Occur": "search.BooleanClause$Occur",
        "MatchNoDocsQuery": "search.MatchNoDocsQuery",
    }
    L = {name: autoclass(f"org.apache.lucene.{path}") for name, path in classes.items()}
    FeatureField, Occur = L["FeatureField"], L["Occur"]

    directory = L["Directory"]()
    writer = L["IndexWriter"](directory, L["IndexWriterConfig"]())
    with open(bulk, encoding="utf-8") as f:
        lines = [json.loads(line) for line in f if line.strip()]
    field = None
    for _action, source in zip(lines[0::2], lines[1::2]):
        doc = L["Document"]()
        doc.add(L["StringField"]("doc_id", source["doc_id"], L["Store"].YES))
        field = field or next(k for k in source if k != "doc_id")
        for key, value in source[field].items():
            doc.add(FeatureField(field, key, float(value)))
        writer.addDocument(doc)
    writer.close()
    reader = L["DirectoryReader"].open(directory)
    searcher = L["IndexSearcher"](reader.getContext())
    results = []
    for body in json.load(open(bodies_path)):
        query = body["query"]
        if "match_none" in query:
            lucene_query = L["MatchNoDocsQuery"]()
        else:
            builder = L["Builder"]()
            for clause in query["bool"]["should"]:
                rf = clause["rank_feature"]
                assert rf["linear"] == {}
                name, key = rf["field"].split(".", 1)
                builder.add(FeatureField.newLinearQuery(name, key, float(rf["boost"])), Occur.SHOULD)
            lucene_query = builder.build()
        top = searcher.search(lucene_query, int(body["size"]))
        stored = searcher.storedFields()
        results.append([[stored.document(hit.doc).get("doc_id"), float(hit.score)] for hit in top.scoreDocs])
    with open(out, "w") as f:
        json.dump(results, f)


if __name__ == "__main__":
    main(*sys.argv[1:5])
