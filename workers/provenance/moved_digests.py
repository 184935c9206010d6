"""Content digests that a move of code changed although the code did not change: each maps the digest
a registered (algorithm, environment kind, sharding) had on the tree before the move to the digest of
the same code after it (workers.provenance.legacy_identity.content_digest_of reads it, so a trial
stamped before the move is current, and the report counts one code version).

A move changes no content digest, but for one case: a module that a root takes whole
(code_identity's SHARDED_ROOTS; core.engine.round_loop, core.engine.seeding,
workers.execution.trial_setup) is digested statement by statement, so an import statement it had to
split into two changes the digest of every trial that reaches it. Entries are written once, from the
digests of the trees before and after such a move (as workers.provenance.legacy_table's
``old_digests`` and ``new_digests`` compute them), for the kinds whose digest differs; never
regenerated on a later tree, never removed.

- core laid out in rooms (after 1d27146): the sharded coordinator and shard
  (core.kernel.sharded.coordinator, .shard) imported ``domains`` and ``seeding`` (the shard also
  ``registry``) in one statement from banditsweep.core; those modules now live in two rooms
  (core.kernel, core.engine), so each import became two statements: every sharded trial kind.
"""

MOVED_DIGESTS: dict[str, str] = {
    "3ec7db71a9b873df7f7242eb": "e439b5502549718df8e2a21a",   # apg_exp3 on adversarial_kernel, sharded
    "a8742a61bc5b761932e7207a": "a35ca8104d85f46c9393338c",   # apg_exp3 on classification, sharded
    "6bfa45ec35c9f7c56a9b8a62": "e9fb4c29f7574a0c374a1c8a",   # apg_exp3 on kernel_lower_bound, sharded
    "5b6e745c28cc15f921f22362": "70f2e28ad1f595c307339594",   # apg_exp3 on synthetic, sharded
    "e210f4149c93dc9ad6fa5a3b": "51711d1a5a47acac9e674ba1",   # bootstrapped_nn on adversarial_kernel, sharded
    "9c5734ca0ee0725e172137c0": "6f299096887c25e9053f7c40",   # bootstrapped_nn on classification, sharded
    "0b489eb42b667c6599bb71e3": "a7ac14a784010bbbf6008024",   # bootstrapped_nn on kernel_lower_bound, sharded
    "e7dc28670f1b3978045c6c3e": "e5083771427f5231889984a6",   # bootstrapped_nn on synthetic, sharded
    "49f89bd1339b830c2c850ce8": "9747820248de697cfeabad61",   # deep_fpl on adversarial_kernel, sharded
    "2e0cb1c837156bdf5267b568": "70675a9d7621777463ae6a77",   # deep_fpl on classification, sharded
    "87eb443cb2c3639bfd6efa85": "26aa8176eea72a3c88b66127",   # deep_fpl on kernel_lower_bound, sharded
    "e3a59888c290fd7c4380c555": "a98ee757ee3216fb8b532807",   # deep_fpl on synthetic, sharded
    "e1fca763898e8288040ce125": "2a4e711e9c1a9fffe58dae66",   # kernel_exp3 on adversarial_kernel, sharded
    "eae9dda84d4ff853c906d367": "b660dddcebe58816d4e39fba",   # kernel_exp3 on classification, sharded
    "a5347f3eeb98cf7193afa5dc": "76d1826618786d669689ab44",   # kernel_exp3 on kernel_lower_bound, sharded
    "c4d764fe22e6ea233d7d2761": "a6f2aa7003c760daef33fd82",   # kernel_exp3 on synthetic, sharded
    "00724b6d174f1f3c267385f8": "9dee3f006c98cc5679eb4950",   # linrbmle on adversarial_kernel, sharded
    "3cda89fbbc8c6e775bed06d2": "2ba4b0bd46db48ef0c0e30d8",   # linrbmle on classification, sharded
    "9089164cd6a27b67bd546406": "d508f0b3ad8ce8ae293c4594",   # linrbmle on kernel_lower_bound, sharded
    "85cada2a46769daca794639d": "258fc37e835bd555b9542d5a",   # linrbmle on synthetic, sharded
    "2a175805301e547726328790": "1f580574da935d4df793d024",   # lints on adversarial_kernel, sharded
    "483b67e88b32d0a83a7af943": "7be648ce54d630d876e847d6",   # lints on classification, sharded
    "94cce42393d8c8a8841cc775": "54c60e0e12bf321ff45d6ace",   # lints on kernel_lower_bound, sharded
    "f4474cac97c90e01e8a62901": "176d86b1da1356ca6b25ac3d",   # lints on synthetic, sharded
    "90c92b5ab2113168294921b5": "2347a5b652dfde79f0a618ee",   # linucb on adversarial_kernel, sharded
    "b96cf7120bbe208857eeb601": "75c674cbf1f11f631214463e",   # linucb on classification, sharded
    "29f94d3c0665a5ba40f085ef": "1b88f1cb5cd3c7ee7df320f2",   # linucb on kernel_lower_bound, sharded
    "c2b17886b92c07fc7626128b": "effd4ad5147fbe64ee831dec",   # linucb on synthetic, sharded
    "2a214db291b3088daa747999": "da4c989619d2c768805cda9d",   # neural_eps_greedy on adversarial_kernel, sharded
    "0f1be90920221ae9da4e227d": "51179918a4f0b4ada6feb22a",   # neural_eps_greedy on classification, sharded
    "7cf93a94010e116e5c63191c": "d3254364bf0435f66ef7cc51",   # neural_eps_greedy on kernel_lower_bound, sharded
    "fa76a5e0c5f866fcdd05d76c": "849e1337c2edb54ee9dca9c2",   # neural_eps_greedy on synthetic, sharded
    "426581e801d64764050f7989": "083783d70ad99fff9bced831",   # neural_rbmle_ga on adversarial_kernel, sharded
    "980564e8bb64580fdd55edd9": "0479f6a3b30840d2dac04b78",   # neural_rbmle_ga on classification, sharded
    "08a6b70b707db59c57b1a8ac": "68c2b50d50630d1c6ed2d1da",   # neural_rbmle_ga on kernel_lower_bound, sharded
    "830cf082d87eff5e7801b6b6": "64add24cd4b5f6a39b39855a",   # neural_rbmle_ga on synthetic, sharded
    "a91eb10deaf9edc9e645e70d": "18c4723b30b4f9404ff79559",   # neural_rbmle_pc on adversarial_kernel, sharded
    "4e8a626995cbb75944d706e7": "1bc48e7abf7a0fb461efe7c0",   # neural_rbmle_pc on classification, sharded
    "9b6a293c515d639f86d3a964": "f74532e1554285eb164888eb",   # neural_rbmle_pc on kernel_lower_bound, sharded
    "687b67fa4a985833d68388ee": "c7d6c64f47c8d5ab0255a567",   # neural_rbmle_pc on synthetic, sharded
    "012582bc06441128d1ba6ce2": "a3fa63c04f7e66099aef6fc1",   # neural_ts on adversarial_kernel, sharded
    "10dfa8d2e6be1de9955e91c0": "76655a6c87b3b4e131602dac",   # neural_ts on classification, sharded
    "01319a67dd5a72961ae97dcd": "932346ea67857e37d0fa2480",   # neural_ts on kernel_lower_bound, sharded
    "7d69df99e6822c80336bc710": "a99f2fc22dc9a136d21b95c3",   # neural_ts on synthetic, sharded
    "3a237cb6ce61188d76999d0b": "7a4ce1773137bd82b01618ae",   # neural_ucb on adversarial_kernel, sharded
    "350b2f9be8cb608466e8b48d": "13315e4e09a987576043f807",   # neural_ucb on classification, sharded
    "f5ade34f3d18a2ffb901d966": "b0d773a881c83eb4e06eb561",   # neural_ucb on kernel_lower_bound, sharded
    "c679b6d196625b669f2f07d2": "35d5267bc5b3b560230f79ef",   # neural_ucb on synthetic, sharded
    "67be59a226e7397c182a758f": "ca8c1bc79f8ee460db722f39",   # random on adversarial_kernel, sharded
    "a4ac9ac94cd984636d671077": "016a944cff733a6a1e468661",   # random on classification, sharded
    "2b83a84b592281429ba3dd82": "5c714f47261e2d60bc79da11",   # random on kernel_lower_bound, sharded
    "c610d902b14a1fdcf9ca3d16": "72e878fd9c35955bd2a7e65c",   # random on synthetic, sharded
    "bed36e066bf1781e98d039c7": "2c6c2c0f867cf1c6c5460095",   # rls_kernel_exp3_amvr on adversarial_kernel, sharded
    "13084f94d06ba0f5787644f1": "355ead6e514059321b59d3e2",   # rls_kernel_exp3_amvr on classification, sharded
    "06539c0c2689b84a19ad004e": "d6af35e4c100e28464223db7",   # rls_kernel_exp3_amvr on kernel_lower_bound, sharded
    "f8708602b3c22cba5b0205ec": "e0180e2063004aac7bf80e2a",   # rls_kernel_exp3_amvr on synthetic, sharded
    "f3885620bef0beb12447c7e4": "1b08f790a510934266f78b7a",   # rls_kernel_exp3 on adversarial_kernel, sharded
    "dc8fbff02a46f92d12e6f8a0": "91300ba169c94fc69af7c096",   # rls_kernel_exp3 on classification, sharded
    "6f23943538150d3dd83a5602": "f23d49a34445f59ef9f24a35",   # rls_kernel_exp3 on kernel_lower_bound, sharded
    "0aec6b212757fa62c2985597": "26456a32c3623b6329d9d1f8",   # rls_kernel_exp3 on synthetic, sharded
}
